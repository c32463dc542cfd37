"""`swe-rlvr instances {list,validate,export}`: look at, check and convert instance files.

Every command takes an instance file (JSON, JSONL or Parquet of any SWE-bench-family format) or
the word `builtin`. Only `swe_rlvr.loaders` is imported, inside the handlers.
"""

from __future__ import annotations

import argparse

FORMAT_HELP = "auto, swe-bench, swe-gym, swe-rebench, swe-smith or internal (default: auto)"


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("instances", help="list, validate and export SWE task instances")
    commands = group.add_subparsers(dest="instances_command", metavar="ACTION")
    commands.required = True

    show = commands.add_parser("list", help="a table of the instances in a file")
    _source_args(show)
    show.add_argument("--split", default=None,
                      help="only this split (train, test, dev; default: all)")
    show.set_defaults(handler=list_instances)

    check = commands.add_parser("validate", help="check every record; exit 1 if any is invalid")
    _source_args(check)
    check.add_argument("--skip-invalid", action="store_true",
                       help="go on past invalid records and report each "
                            "(default: stop at the first)")
    check.set_defaults(handler=validate_instances)

    export = commands.add_parser("export", help="write normalised instances (.parquet or .jsonl)")
    _source_args(export)
    export.add_argument("--out", required=True, help="instances.parquet, or a .jsonl file")
    export.add_argument("--split", default=None,
                        help="only this split (train, test, dev; default: all)")
    export.add_argument("--skip-invalid", action="store_true", help="skip invalid records")
    export.set_defaults(handler=export_instances)


def _source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE|builtin", help="instance file, or builtin")
    parser.add_argument("--format", default="auto", help=FORMAT_HELP)


def list_instances(args: argparse.Namespace) -> int:
    from swe_rlvr.loaders import load_instances, select

    result = load_instances(args.file, format=args.format)
    rows = select(result.instances, split=args.split)
    print(format_table(rows))
    repos = len({i.repo for i in rows})
    print(f"{len(rows)} instances from {repos} repos ({result.format} format"
          f"{', split ' + args.split if args.split else ''}); {len(result.skipped)} skipped")
    return 0


def format_table(instances: list) -> str:
    """A fixed-width table: id, repo, source, split, difficulty, #F2P, #P2P."""
    header = ("id", "repo", "source", "split", "difficulty", "#F2P", "#P2P")
    rows = [(i.instance_id, i.repo, i.source, i.split or "-", i.difficulty or "-",
             str(len(i.fail_to_pass)), str(len(i.pass_to_pass))) for i in instances]
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def validate_instances(args: argparse.Namespace) -> int:
    from swe_rlvr.loaders import InstanceError, load_instances

    try:
        result = load_instances(args.file, format=args.format, skip_invalid=args.skip_invalid)
    except InstanceError as exc:
        print(f"invalid: {exc}")
        return 1
    for bad in result.skipped:
        print(f"invalid: {bad.message}")
    print(f"{len(result.instances)} valid, {len(result.skipped)} invalid "
          f"({result.format} format, {args.file})")
    return 1 if result.skipped else 0


def export_instances(args: argparse.Namespace) -> int:
    from swe_rlvr.loaders import load_instances, select, write_instances

    result = load_instances(args.file, format=args.format, skip_invalid=args.skip_invalid)
    rows = select(result.instances, split=args.split)
    write_instances(args.out, rows)
    print(f"wrote {len(rows)} instances to {args.out} ({len(result.skipped)} invalid skipped)")
    return 0
