"""Encoders and model sets: a model directory's card and manifest, the vocabulary, the
onnxruntime encoder that turns questions into vectors (no torch), the default model set, and
the model-specific scorers that ride on an encoder (the BOW-CNN scorer, the tag head)."""
