"""The report's sections, each computed from ``ReportInputs``: environment, experiment, gates,
kernel details, projection, resources, time decomposition.
"""
