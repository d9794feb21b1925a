"""The torch-free foundation beneath prbench/, stages/ and analysis/: the one-line user error (``errors``),
checked readers of JSON records (``records``), atomic writes (``atomic_io``), OS errors in words
(``io_errors``), checked flag values (``flag_values``) and every versioned file format the host and the
stages exchange (``formats``). Imports only the standard library, numpy and pandas; never a room above it.
"""
