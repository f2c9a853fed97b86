"""What every step and subsystem shares: params, settings, step declaration and records, atomic files, logging.

Light on purpose (the standard library, PyYAML, pydantic): DAG files may import it at run time.
"""
