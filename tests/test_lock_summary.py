"""The report's environment table says which image each side ran: ids, base digest, wheel pins and checksums."""

from __future__ import annotations

from analysis.report.sections.environment import environment_line, environment_table, lock_summary, with_lock_summaries

TORCH_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"


def docker_lock(image_id: str, overlay: str | None) -> dict:
    return {
        "base": {"name": "prbench-test/bookworm:base", "digest": "sha256:" + "b" * 64},
        "sources": {"pytorch": {"wheel": "torch==2.13.0+cpu", "sha256": TORCH_SHA}},
        "overlay_sha256": overlay,
        "store": [{"kind": "wheel", "name": "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                   "sha256": TORCH_SHA, "size": 1, "origin": "pip download", "used_as": "wheels/pytorch"},
                  {"kind": "source-archive", "name": "x.tar", "sha256": "c" * 64, "size": 1, "origin": "git",
                   "used_as": "src/pytorch"}],
        "contents": {"pip": {"torch": "2.13.0+cpu"}, "versions": {"torch_git": "a" * 40}},
        "provenance": {"image": {"tag": "prbench/cpu-docker:0123456789ab", "id": image_id}},
    }


def test_each_side_shows_its_image_the_base_digest_and_the_wheel_checksums() -> None:
    base_lock, pr_lock = docker_lock("sha256:" + "1" * 64, None), docker_lock("sha256:" + "2" * 64, "d" * 64)

    table = environment_table(*with_lock_summaries({"runner": "docker"}, {"runner": "docker"},
                                                   {"base": base_lock, "pr": pr_lock}))
    rows = {row.setting: (row.base, row.pr, row.same) for row in table.itertuples()}

    assert rows["lock.image id"] == ("sha256:" + "1" * 64, "sha256:" + "2" * 64, "**differs**")
    assert rows["lock.base digest"][:2] == ("sha256:" + "b" * 64,) * 2
    assert rows["lock.torch wheel sha256"] == (TORCH_SHA, TORCH_SHA, "✓")
    assert rows["lock.wheels installed from the store"][0] == "1 (sha256 of each in lock.json)"
    assert rows["lock.torch git (read in the image)"][0] == "a" * 40
    assert not [key for key in rows if "x.tar" in key]  # source archives are in the lock table, not here


def test_a_local_side_shows_the_torch_it_imported_and_no_lock_means_no_rows() -> None:
    local = {"runner": "local", "environment": {"torch": "2.13.0+cpu", "torch_git": "e" * 40}}

    assert lock_summary(local) == {"torch (local)": "2.13.0+cpu", "torch git (local)": "e" * 40}
    assert with_lock_summaries({"a": 1}, {"a": 2}, {}) == ({"a": 1}, {"a": 2})


def test_the_table_lists_the_nodes_and_devices_the_shards_ran_on_once_for_both_sides() -> None:
    nodes = {"gpu-node-1": {"devices": ["GPU 0", "GPU 1"], "shards": 12, "facts": {"host": "gpu-node-1"}},
             "gpu-node-2": {"devices": ["GPU 3"], "shards": 5}}

    table = environment_table(*with_lock_summaries({"runner": "local"}, {"runner": "local"}, {"nodes": nodes}))
    rows = {row.setting: (row.base, row.pr, row.same) for row in table.itertuples()}

    assert rows["ran on.gpu-node-1"] == ("GPU 0, GPU 1 (12 shards)", "GPU 0, GPU 1 (12 shards)", "✓")
    assert rows["ran on.gpu-node-2"] == ("GPU 3 (5 shards)", "GPU 3 (5 shards)", "✓")


def test_a_venv_side_shows_its_directory_python_wheels_and_the_triton_its_torch_brought() -> None:
    def venv_lock(torch: str, triton: str | None) -> dict:
        pip = {"torch": torch, **({"triton": triton} if triton else {})}
        return {"runner": "venv", "base": {"python": "3.11.7"}, "sources": {"pytorch": {"wheel": f"torch=={torch}",
                                                                                        "sha256": TORCH_SHA}},
                "contents": {"pip": pip}, "provenance": {"venv": {"path": f"/runs/venvs/cpu-venv-{torch}"}}}

    table = environment_table(*with_lock_summaries({"runner": "local"}, {"runner": "local"},
                                                   {"base": venv_lock("2.13.0+cpu", None),
                                                    "pr": venv_lock("2.14.1", "3.8.0")}))
    rows = {row.setting: (row.base, row.pr, row.same) for row in table.itertuples()}

    assert rows["lock.venv"] == ("/runs/venvs/cpu-venv-2.13.0+cpu", "/runs/venvs/cpu-venv-2.14.1", "**differs**")
    assert rows["lock.venv python"] == ("3.11.7", "3.11.7", "✓")
    assert rows["lock.torch wheel"] == ("torch==2.13.0+cpu", "torch==2.14.1", "**differs**")
    assert rows["lock.triton version"] == ("–", "3.8.0", "**differs**")


def test_a_release_ab_names_both_torch_versions_and_the_triton_only_the_pr_wheel_brought_in_one_line() -> None:
    base_lock = docker_lock("sha256:" + "1" * 64, None)
    pr_lock = docker_lock("sha256:" + "2" * 64, None)
    pr_lock["contents"]["pip"] = {"torch": "2.14.1", "triton": "3.8.0"}

    line = environment_line({"runner": "docker"}, {"base": base_lock, "pr": pr_lock}, {})
    same = environment_line({"runner": "docker"}, {"base": base_lock, "pr": base_lock}, {})

    assert "torch 2.13.0+cpu → 2.14.1, Triton – → 3.8.0." in line
    assert "torch 2.13.0+cpu, Triton –." in same
