"""Memory of a long-running process that meets 1,000,000 distinct entities (on demand).

    python -m benchmarks.memory [--entities 1000000] [--json PATH]

1,000,000 acquires against DynamoDB Local would take hours on a small machine, so this drives
every per-entity memory a process keeps, with the sizes a `Repository` gives them, through the
methods the acquire path calls on them, one distinct entity at a time:

- the config cache (`ConfigCache`, 50,000 entries): the entity's resolved config and its
  `("unmetered", entity, resource)` entry, as `Resolver` stores them;
- the image cache (`ImageCache`, `rejection_cache_size` 10,000): the image a write returned;
- the split detector (`SplitDetector`): the write rate of the bucket's shard;
- the warn-once sets: a cascade parent judged on defaults (`TargetFinder`), an unmetered
  resource name (`Unmetered`).

It reports the process's resident set (VmRSS) before, every 100,000 entities and after, and each
container's size at the end. For comparison it then keeps the same entries in plain dicts (what
an unbounded cache would hold) and reports that RSS too.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def rss_mib() -> float:
    """This process's resident set size now (Linux /proc), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def drive(entities: int, every: int = 100_000) -> dict[str, Any]:
    from support.acquire_env import AcquireEnv
    from zae_limiter.acquire.planning import blank_image
    from zae_limiter.caches import CONFIG_CACHE_MAX_ENTRIES, ConfigCache, ImageCache
    from zae_limiter.unmetered import Unmetered

    env = AcquireEnv()  # an Admission (finder, split detector) over the in-memory store double
    config = ConfigCache(ttl_seconds=60)
    images = ImageCache(rejection_ttl_seconds=1.0, size=10_000)  # Repository's defaults
    detector = env.admission.detector
    finder = env.admission.finder

    async def none() -> list[str]:
        return []

    unmetered = Unmetered("allow", "default", none)
    stamp = env.stamp()
    loop = asyncio.new_event_loop()
    gc.collect()
    samples = [{"entities": 0, "rss_mib": rss_mib()}]
    for i in range(entities):
        entity = f"user-{i:07d}"
        config.put(("entity", entity), {"search": None}, now=i)
        config.put(("unmetered", entity, "search"), None, now=i)
        image = blank_image("ns1", entity, "search", stamp, 1)
        images.put(image, now=i)
        detector.too_hot(image)
        finder._note_parent_fallback(f"org-{i}", "search")
        loop.run_until_complete(unmetered.admit(f"typo-{i % 50_000}"))
        if (i + 1) % every == 0 or i + 1 == entities:
            gc.collect()
            samples.append({"entities": i + 1, "rss_mib": rss_mib()})
    loop.close()
    sizes = {
        "config_cache": len(config),
        "config_cache_bound": CONFIG_CACHE_MAX_ENTRIES,
        "image_cache": len(images._images),
        "image_cache_newest": len(images._newest),
        "split_detector": len(detector._rates),
        "parent_fallback_warned": len(finder._warned_parent_fallback),
        "unmetered_warned": len(unmetered._warned),
    }
    return {"samples": samples, "sizes": sizes}


def unbounded(entities: int) -> float:
    """RSS (MiB) growth of the same per-entity entries in plain dicts: what no bound would cost."""
    gc.collect()
    before = rss_mib()
    config: dict[Any, Any] = {}
    seen: dict[Any, Any] = {}
    for i in range(entities):
        entity = f"user-{i:07d}"
        config[("entity", entity)] = {"search": None}
        config[("unmetered", entity, "search")] = None
        seen[("ns1", entity, "search", 0)] = (entity, i)
    gc.collect()
    grown = rss_mib() - before
    del config, seen
    return grown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the warn-once sets log; a million lines helps nobody
    result = drive(args.entities)
    result["unbounded_growth_mib"] = unbounded(args.entities)
    first, last = result["samples"][0], result["samples"][-1]
    peak = max(s["rss_mib"] for s in result["samples"])
    result["summary"] = {
        "entities": args.entities,
        "rss_before_mib": round(first["rss_mib"], 1),
        "rss_after_mib": round(last["rss_mib"], 1),
        "rss_peak_mib": round(peak, 1),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
