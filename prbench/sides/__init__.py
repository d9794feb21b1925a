"""What a side's environment is made of: the recipe (``recipes``: its schema and checks), variant specs and
``--env`` assignments (``variants``), the installed torch an interpreter imports (``local_torch``), the PR's
Python files as a shadow package (``overlay``), patches, the clones, commits and pins a side builds from (``pins``)
and git refs, and the precompiled C++ headers local sides share (``header_cache``). Beneath images/, runners/ and
compare/, which build and run sides from them (``prbench.compare.variant_plan`` plans a comparison's two).
"""
