"""Host-side orchestration: recipes, variants, git refs, images, runners, the run store, locks and the pipeline."""

__version__ = "0.1.0"
