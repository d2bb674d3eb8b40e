"""Training and ONNX export of the neural question encoders (needs ``pip install 'qres[train]'``).

Only this package imports torch; serving (``qres.encoders.runtime``) runs the exported ONNX graphs.
"""
