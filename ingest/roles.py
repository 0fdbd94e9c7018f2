"""The folders of an RL job that name a role: what discovery and ``cluster_phases`` read from a rank's path.

verl writes each role's profile under ``<save_path>/<role>/`` (``verl/utils/profiler/mstx_profile.py``): in
discrete mode one ``*_ascend_pt`` folder per profiled call, named after the worker method
(``rollout_generate``, ``actor_compute_log_prob``, ``ref_compute_log_prob``, ``actor_update``, ``compute_values``,
``critic_update``, ``compute_rm_score``); end to end, ``e2e/`` for the colocated actor-rollout workers. Role
folders may also be plain role names (``actor/``, ``rollout/``, …: worker groups that are not colocated), or
MindSpeed-RL's profiler stages (``actor_generate``, ``reference_compute_log_prob``, ``critic_compute_values``, …). Every
group numbers its ranks from 0, so the same rank id is in several of them (docs/phases.md).
"""

from __future__ import annotations

from pathlib import PurePath

ROLE_FOLDERS = {
    "actor": "actor", "rollout": "rollout", "ref": "ref", "reference": "ref", "critic": "critic",
    "reward": "reward", "rm": "reward",
    # verl's DistProfiler.annotate(role=...) folders of discrete mode
    "rollout_generate": "rollout", "actor_compute_log_prob": "actor", "actor_update": "actor",
    "ref_compute_log_prob": "ref", "compute_values": "critic", "critic_update": "critic",
    "compute_rm_score": "reward",
    # MindSpeed-RL's profiler stages (profiler_config.integrated.stage)
    "actor_generate": "rollout", "reference_compute_log_prob": "ref", "critic_compute_values": "critic",
}
# folders that group a job's ranks without naming one role (verl's end-to-end profile of colocated workers)
GROUP_FOLDERS = {**ROLE_FOLDERS, "e2e": None}


def _parts(folder: str | PurePath | None) -> list[str]:
    """The folders above the rank folder, nearest first."""
    return list(reversed(str(folder or "").replace("\\", "/").split("/")[:-1]))


def folder_role(folder) -> str | None:
    """The role a folder of the rank's path names (the nearest to the rank folder wins)."""
    for part in _parts(folder):
        role = ROLE_FOLDERS.get(part.lower())
        if role:
            return role
    return None


def group_folder(folder) -> str | None:
    """The nearest folder of the rank's path that groups an RL job's ranks (a role folder or ``e2e``), as named."""
    for part in _parts(folder):
        if part.lower() in GROUP_FOLDERS:
            return part
    return None
