"""The training commands: ``qres train``, ``qres export-onnx`` and ``qres import-encoder``;
torch is imported only when a command runs."""
