"""Model compression: ONNX export, the compression techniques, their search and gate.

Today the `compress` step (tasks/compress.py) exports ONNX and quantizes it to int8;
the techniques and their search land here (issue: compression).
"""
