"""Pure analyses over the trace model: breakdowns, categories, the timeline, ops and their shapes,
launch costs, collectives, replay sets, serving steps, the roofline.
"""
