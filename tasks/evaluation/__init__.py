"""Model quality: metrics on the positive class and scoring of the gold sets with torch or ONNX."""
