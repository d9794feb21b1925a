"""Images: what an environment is built from, and building it.

A recipe and a variant become a `build_plan.BuildPlan` (``build.plan_build``: the rendered Dockerfile, the exact
source commits, patches, overlay, wheel pins; its inputs hash into the tag); ``build.build_image`` builds it with
the context ``build_context`` fills from the content store (``content_store``: source archives, wheelhouses,
Triton's downloads, saved base images; ``invoke store`` is ``store_command``); ``image_lock`` writes and reads an
image's lock.json and rebuilds from it. Talks to Docker only through ``prbench.images.docker_engine``.

May import: analysis (base, formats), prbench base modules. Not prbench.runs/compare/publish, never stages.
"""
