"""What the runnable stages share (imported, never run as ``python -m``): worker processes, timing,
progress, the stage environment, the Hugging Face models and harness configs, training steps, the
numerics and the C++/Triton CPU helpers.
"""
