"""The limits manifest (docs/manifest.md): parse and check, plan, apply, export.

    manifest = load_file("limits.yaml")                 # pure: every check that needs no table
    plan = await plan_manifest(repo, manifest)          # read-only
    result = await apply_plan(repo, manifest, plan)     # writes through the Repository API

`make_plan` (in `plan`) is the pure core: stored state and the manifest's ownership record in,
changes out.
"""

from .apply import (
    ApplyInterrupted,
    ApplyResult,
    apply_change,
    apply_manifest,
    apply_plan,
    plan_manifest,
)
from .export import export_manifest, to_yaml
from .limit_parse import parse_limits
from .model import UNSET, EntitySpec, LevelSpec, Manifest, ManifestError, Subject, SystemSpec
from .parse import load_file, load_file_limits, loads, parse
from .plan import Change, EntityState, Ownership, Plan, Stored, limit_to_manifest, make_plan
from .source import load_yaml
from .state import ConcurrentApplyError, read_ownership, read_stored

__all__ = [
    "UNSET",
    "ApplyInterrupted",
    "ApplyResult",
    "Change",
    "ConcurrentApplyError",
    "EntitySpec",
    "EntityState",
    "LevelSpec",
    "Manifest",
    "ManifestError",
    "Ownership",
    "Plan",
    "Stored",
    "Subject",
    "SystemSpec",
    "apply_change",
    "apply_manifest",
    "apply_plan",
    "export_manifest",
    "limit_to_manifest",
    "load_file",
    "load_file_limits",
    "load_yaml",
    "loads",
    "make_plan",
    "parse",
    "parse_limits",
    "plan_manifest",
    "read_ownership",
    "read_stored",
    "to_yaml",
]
