"""Code that runs inside an environment (the local Python or a container).

Each stage is a module runnable as ``python -m stages.<name>`` that reads and writes files under the
directories it is given. Stages import only the standard library, torch, triton, transformers and the
pure ``analysis`` package; they never know which runner started them.
"""
