"""Profile readers: Kineto, rocprof, nsys, Inductor's ``-p`` output, each into the common trace model
(``analysis.traces.model``); ``by_content`` picks the reader for a file.
"""
