"""Logging functions with the Compass Optimizer's names, for plugins and core alike."""
import logging
import sys

from .errors import NpuoptError

_logger = logging.getLogger("npuopt")
if not _logger.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    _logger.addHandler(_handler)
    _logger.setLevel(logging.INFO)
    _logger.propagate = False


def set_verbose(verbose: bool) -> None:
    _logger.setLevel(logging.DEBUG if verbose else logging.INFO)


def set_quiet() -> None:
    """Errors only: a rank other than 0 of a data-parallel job, whose rank 0 says the rest."""
    _logger.setLevel(logging.ERROR)


def OPT_DEBUG(msg, *args):
    _logger.debug(msg, *args)


def OPT_INFO(msg, *args):
    _logger.info(msg, *args)


def OPT_WARN(msg, *args):
    _logger.warning(msg, *args)


def OPT_ERROR(msg, *args):
    _logger.error(msg, *args)


def OPT_FATAL(msg, *args):
    """Log nothing and stop: the CLI prints the message once, as the error line."""
    raise NpuoptError(msg % args if args else msg)


__all__ = ["OPT_DEBUG", "OPT_INFO", "OPT_WARN", "OPT_ERROR", "OPT_FATAL"]
