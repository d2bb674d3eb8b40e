"""Training and ONNX export of the neural question encoders (needs ``pip install 'qres[train]'``).

Only this package imports torch; serving (``qres.encoder``) runs the exported ONNX graphs.
"""
