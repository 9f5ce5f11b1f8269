"""Adapters for training frameworks; each module imports its framework, the package none.

``ckptzip.integrations.lightning`` (``pip install ckptzip[lightning]``): a ``CheckpointIO``.
``ckptzip.integrations.transformers`` (``pip install ckptzip[hf]``): a ``Trainer`` callback.
"""
