"""The `npuopt` command. Errors are caught here, once, and printed as one line."""
import os
import signal
import sys
import threading
import traceback

import click

from . import __version__
from .errors import NpuoptError, one_line
from .logger import set_verbose
from .ranks import RankError, Ranks

_job = Ranks()  # this process's place in a data-parallel job (one process: rank 0 of 1)

HELP = """Quantize a float Compass/Zhouyi NPU IR model after training.

\b
  npuopt --cfg opt.cfg     run the pipeline configured in opt.cfg
  npuopt --field           list every cfg field, its default and meaning
  npuopt --plugin          list op, dataset and metric plugins found

What --cfg does: load and check the IR (graph + weights); forward it once with
all-zero inputs (every layer runs, shapes are checked against the IR); fold
BatchNorm and fuse activations; calibrate over `calibration_data` (or load
`statistic_file`); quantize every layer in integers (layers kept in float by
`trigger_float_op`/`opt_config`, or with no quantize function, sit behind
Quantize/DeQuantize layers); write <output_dir>/<out_ir_name>_o.txt/.bin and
<out_ir_name>_opt_template.json; then run the float and the quantized graph
over `data` with the configured metrics and write
<output_dir>/<model_name>_report.json (metrics, drop, worst layers). Files
appear only when the whole run succeeded, and never over the run's inputs.

Plugins are read from the built-in plugins, ./plugin/, and every folder on
AIPUPLUGIN_PATH (':'-separated); for one name the highest version wins.

\b
Data-parallel, on one machine or several (torch.distributed, gloo on CPUs,
nccl on GPUs): each rank reads its share of the data, the results are those
of one process, rank 0 writes the files:
  torchrun --nproc_per_node 2 -m npuopt --cfg opt.cfg
"""


@click.command(help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--cfg", "cfg_path", metavar="FILE", help="the cfg file (INI, [Common] section)")
@click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
              help="override a cfg field (repeatable); relative paths are taken from the working directory")
@click.option("--field", "show_fields", is_flag=True, help="list every cfg field with its default and help")
@click.option("--markdown", is_flag=True, help="with --field: the list as docs/fields.md has it")
@click.option("--plugin", "show_plugins", is_flag=True, help="list registered ops, datasets and metrics")
@click.option("--verbose", "-v", is_flag=True, help="debug logs, and a traceback on errors")
@click.version_option(__version__, "--version", prog_name="npuopt")
def main(cfg_path, overrides, show_fields, markdown, show_plugins, verbose):
    set_verbose(verbose)
    try:
        if show_fields:
            _print_fields(markdown)
        if show_plugins:
            _print_plugins()
        if cfg_path:
            _run(cfg_path, overrides)
        elif not (show_fields or show_plugins):
            click.echo(click.get_current_context().get_help())
    except RankError as e:
        _fail_with_job(_job.failure_line(str(e)), verbose)
    except NpuoptError as e:
        _fail(str(e), verbose)
    except KeyboardInterrupt as e:
        if _job.parallel:  # torchrun ends the other ranks once one failed or died
            _fail_with_job(_job.failure_line(f"interrupted{f' by {e}' if str(e) else ''}"), verbose)
        _fail(f"interrupted{f' by {e}' if str(e) else ''}", verbose)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
    except Exception as e:  # a bug of ours: still one line, with a pointer to --verbose
        _fail(f"internal error: {type(e).__name__}: {e} (run with --verbose for the traceback)", verbose)


def _fail(message: str, verbose: bool) -> None:
    """This process's error: in a job of several ranks, said by the first rank to fail only
    (before the ranks joined, by rank 0: they all read the same cfg)."""
    if _job.parallel:
        first = _job.record_failure(one_line(message))
        _fail_with_job(f"rank {_job.rank}: {message}" if first else None, verbose)
    if os.environ.get("RANK", "0") != "0" and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        _fail_with_job(None, verbose)
    _say(message, verbose)
    sys.exit(1)


def _fail_with_job(line, verbose: bool) -> None:
    """End this rank of a failing job: the job's one error line when `line` (the rank
    that noticed first says it), else quietly (another rank said it)."""
    _say(line, verbose, own_line=True)  # another rank's progress bar may be halfway through a line
    sys.stderr.flush()
    os._exit(1)  # not sys.exit: a process group still open would wait for the ranks that are gone


def _say(line, verbose: bool, own_line: bool = False) -> None:
    """The error line (none when `line` is None), after the progress bars and the traceback;
    `own_line`: after a line break."""
    _close_progress_bars()
    if verbose:
        traceback.print_exc()
    if line:
        click.echo(("\n" if own_line else "") + f"npuopt: error: {one_line(line)}", err=True)


def _close_progress_bars() -> None:
    """End the progress bars an error interrupted, so that the error line starts a line
    of its own and is the last one (a bar left open is redrawn when it is collected)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return
    for bar in list(getattr(tqdm, "_instances", ())):
        try:
            bar.close()
        except AttributeError:  # the signal came while this bar was being made
            pass


def _run(cfg_path, overrides) -> None:
    from .config import load_config
    from .errors import ConfigError
    from . import ranks
    from .logger import set_quiet
    from .memory import map_large_blocks_apart
    from .optmaster import OptMaster
    from .plugins import load_plugins

    map_large_blocks_apart()
    load_plugins()  # plugins may register fields the cfg uses
    pairs = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set '{item}': expected FIELD=VALUE")
        pairs[key.strip()] = value
    cfg = load_config(cfg_path, pairs)
    with _signals_interrupt():
        global _job
        _job = ranks.from_environment(ranks.select_device(cfg.device).type)
        if not _job.main:  # rank 0 says how the job goes
            set_quiet()
        report = OptMaster(cfg, _job).run()
        ranks.close(_job)
    if _job.main:
        click.echo(f"npuopt: done in {report['seconds']} s; report: {report['report_file']}")


class _signals_interrupt:
    """SIGINT and SIGTERM raise KeyboardInterrupt naming the signal, so that a run stopped
    either way removes its temporary files (npuopt/outputs.py); the former handlers come
    back after."""

    def __enter__(self):
        self.former = {}
        if threading.current_thread() is threading.main_thread():  # handlers live in the main thread
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.former[sig] = signal.signal(sig, _raise_interrupt)

    def __exit__(self, *_exc):
        for sig, handler in self.former.items():
            signal.signal(sig, handler)
        return False


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _print_fields(markdown: bool) -> None:
    from .config import field_table, fields_markdown
    from .plugins import load_plugins

    own = {f.name for f in field_table()}  # npuopt's own; plugins add theirs as they load
    load_plugins()
    if markdown:
        click.echo(fields_markdown(own), nl=False)
        return
    fields = field_table()
    width = max(len(f.name) for f in fields)
    for f in fields:
        default = f.default if f.default != "" else "(empty)"
        click.echo(f"{f.name:<{width}}  default: {default}\n{'':<{width}}  {f.help}; accepts {f.accepts}")


def _print_plugins() -> None:
    from .plugins import load_plugins, plugin_dirs
    from .registry import BOUNDARY_TYPES, OP_FORWARDS, OP_QUANTIZERS, PLUGINS, PluginType, failures

    load_plugins()
    click.echo("plugin folders: " + ", ".join(plugin_dirs()))
    sections = [("op forward", OP_FORWARDS), ("op quantize", OP_QUANTIZERS),
                ("dataset", PLUGINS[PluginType.Dataset]), ("metric", PLUGINS[PluginType.Metric]),
                ("train", PLUGINS[PluginType.Train])]
    for kind, registry in sections:
        for reg in registry.all():
            active = "" if registry.best(reg.key) is reg else "  (overridden)"
            click.echo(f"{kind:<12} {reg.key:<24} {reg.version:<8} {_short(reg.source)}{active}")
    for optype in OP_FORWARDS.keys():
        if OP_QUANTIZERS.get(optype) is None and optype not in BOUNDARY_TYPES:
            click.echo(f"{'op float':<12} {optype:<24} {'':<8} kept in float (no quantize function): "
                       f"Quantize/DeQuantize layers around it in a quantized IR")
    for failure in failures:
        click.echo(f"{'failed':<12} {_short(failure.path)}: {failure.error}")


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


if __name__ == "__main__":
    main()
