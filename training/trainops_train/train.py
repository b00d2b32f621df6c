"""Command line: python -m trainops_train.train --config FILE [--run-dir DIR] [--allow-config-change].

Exit status (each rank, when run under torchrun):
  0   finished: all configured steps done (and the final checkpoint written unless disabled)
  75  interrupted, resumable (EX_TEMPFAIL): SIGTERM or SIGINT arrived; a checkpoint of the last completed
      step was written; run the same command again to resume
  2   refused: bad config or arguments, another trainer holds the run, or the newest valid checkpoint was
      written under another config (see --allow-config-change); nothing was trained
  1   failed: any other error
torchrun reports 1 for any non-zero worker exit, so the run directory's logs/result.json records the status
and exit code as well.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from . import config as config_lib
from .run_layout import EXIT_FAILED, EXIT_USAGE
from .signals import StopFlag


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainops_train.train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="training config (.json, or .yml with PyYAML)")
    parser.add_argument("--run-dir", help="run directory (ckpt/, logs/); default runs/<run_id> under the cwd")
    parser.add_argument(
        "--allow-config-change",
        action="store_true",
        help="resume even when the newest checkpoint was written under a different config or world size",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    stop = StopFlag()
    stop.install()  # before torch is imported: a SIGTERM during the import is handled like any other
    args = parse_args(argv)
    try:
        config = config_lib.load(args.config)
    except config_lib.ConfigError as exc:
        sys.stderr.write(f"trainops_train: config error: {exc}\n")
        return EXIT_USAGE
    run_dir = args.run_dir or os.path.join("runs", config.run_id)
    # torch comes in with these: only now, once the signal handlers are in place
    from . import resume
    from .trainer import Trainer

    try:
        result = Trainer(config, run_dir, stop=stop, allow_config_change=args.allow_config_change).run()
    except (config_lib.ConfigError, resume.ResumeRefused, resume.RootLocked) as exc:
        sys.stderr.write(f"trainops_train: {exc}\n")
        return EXIT_USAGE
    except Exception:
        traceback.print_exc()
        return EXIT_FAILED
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
