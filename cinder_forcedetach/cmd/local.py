"""What the cinder-forcedetach commands share.

Every command: exit codes, :class:`CliError`, secret masking.  The
commands that run on a volume host (``attachment refresh``, ``fence
list|lift``) do not go through Cinder's API: like ``cinder-manage`` they
read cinder.conf, open Cinder's database and build the volume driver of a
backend; this module loads the configuration, builds that driver and
prints results.
"""

import json
import logging as std_logging
import re

# Exit codes of every cinder-forcedetach command.
EXIT_OK = 0
EXIT_USAGE = 1
EXIT_NOT_FOUND = 2
EXIT_CONFLICT = 3
EXIT_BACKEND = 4
EXIT_UNREACHABLE = 5

DEFAULT_CONFIG = '/etc/cinder/cinder.conf'
MASK = '***'
# Values that are secrets: CHAP passwords, keys, keyrings, tokens.  Not
# secret_uuid/secret_type, which only name a libvirt secret.
SECRET_RE = re.compile(r'(pass(word|wd)?|token|credential|keyring|^key$|'
                       r'_key$|^secret$|_secret$)', re.IGNORECASE)


class CliError(Exception):
    """An error with the exit code the command ends with."""

    def __init__(self, code, message):
        super(CliError, self).__init__(message)
        self.code = code
        self.message = message


def mask_secrets(value):
    """A copy of *value* with the values of secret-looking keys masked."""
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and SECRET_RE.search(k) and
                    v not in (None, '') else mask_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def _rows(value, prefix=''):
    if isinstance(value, dict) and value:
        rows = []
        for key in value:
            rows += _rows(value[key], '%s.%s' % (prefix, key) if prefix
                          else str(key))
        return rows
    if isinstance(value, (dict, list)):
        value = json.dumps(value)
    return [(prefix, '' if value is None else str(value))]


def _table(header, rows):
    widths = [max([len(h)] + [len(r[i]) for r in rows])
              for i, h in enumerate(header)]
    line = '+-%s-+' % '-+-'.join('-' * w for w in widths)

    def fmt(cells):
        return '| %s |' % ' | '.join(c.ljust(w)
                                     for c, w in zip(cells, widths))
    return '\n'.join([line, fmt(header), line] + [fmt(r) for r in rows] +
                     [line]) + '\n'


def emit(data, fmt, stream):
    """Print one object: a Property/Value table, or JSON."""
    if fmt == 'json':
        stream.write(json.dumps(data, indent=2, sort_keys=True) + '\n')
        return
    stream.write(_table(('Property', 'Value'), _rows(data)))


def emit_list(items, columns, fmt, stream):
    """Print a list of objects: one row each, or a JSON list."""
    if fmt == 'json':
        stream.write(json.dumps(items, indent=2, sort_keys=True) + '\n')
        return

    def cell(value):
        if isinstance(value, (list, tuple)):
            return ','.join(str(v) for v in value)
        return '' if value is None else str(value)
    stream.write(_table(columns, [[cell(i.get(c)) for c in columns]
                                  for i in items]))


def add_config_arguments(parser, with_format=True):
    """Add --config-file, --config-dir, --debug and maybe --format.

    *with_format* False: the caller's top-level parser has ``--format``.
    """
    parser.add_argument('--config-file', action='append', default=None,
                        metavar='FILE',
                        help='cinder configuration file (repeatable; '
                             'default %s)' % DEFAULT_CONFIG)
    parser.add_argument('--config-dir', metavar='DIR', default=None,
                        help='directory of further *.conf files')
    if with_format:
        parser.add_argument('--format', choices=('table', 'json'),
                            default='table', help='output format')
    parser.add_argument('--debug', action='store_true',
                        help='log debug messages on stderr')


def load_config(args):
    """Cinder's configuration from *args*; logging on stderr only."""
    from oslo_config import cfg
    from oslo_log import log as logging

    from cinder.common import config  # noqa: F401  (registers options)
    from cinder import objects
    from cinder import version

    conf = cfg.CONF
    logging.register_options(conf)
    try:
        conf(args=[], project='cinder', version=version.version_string(),
             default_config_files=args.config_file or [DEFAULT_CONFIG],
             default_config_dirs=[args.config_dir] if args.config_dir
             else [])
    except cfg.Error as err:
        raise CliError(EXIT_USAGE,
                       'cannot load the configuration: %s' % err)
    conf.set_override('use_stderr', True)
    conf.set_override('log_file', None)
    conf.set_override('log_dir', None)
    conf.set_override('debug', args.debug)
    logging.setup(conf, 'cinder-forcedetach')
    if not args.debug:
        std_logging.getLogger().setLevel(std_logging.WARNING)
    objects.register_all()
    return conf


def backend_of(volume):
    """(config group, ``host@backend``) of the backend holding *volume*."""
    from cinder.volume import configuration
    from cinder.volume import volume_utils

    backend_host = volume_utils.extract_host(volume.host, 'backend')
    group = (backend_host.split('@', 1)[1] if '@' in backend_host
             else configuration.SHARED_CONF_GROUP)
    return group, backend_host


def named_backend(name=None):
    """(config group, ``host@backend``) of backend *name*.

    Without a name: the only enabled backend, or ``[backend_defaults]``
    when cinder.conf enables none.
    """
    from oslo_config import cfg

    from cinder.volume import configuration

    conf = cfg.CONF
    enabled = [b.strip() for b in (conf.enabled_backends or []) if b.strip()]
    if name is None:
        if len(enabled) > 1:
            raise CliError(EXIT_USAGE, 'cinder.conf enables several '
                           'backends (%s): name one with --backend' %
                           ', '.join(enabled))
        name = enabled[0] if enabled else None
    elif name not in enabled:
        raise CliError(EXIT_NOT_FOUND, 'backend %s is not enabled in '
                       'cinder.conf (enabled_backends: %s)' % (
                           name, ', '.join(enabled) or 'none'))
    if name is None:
        return configuration.SHARED_CONF_GROUP, conf.host
    return name, '%s@%s' % (conf.host, name)


def build_driver(ctxt, group, backend_host, cluster_name=None):
    """The volume driver of config *group*, set up."""
    from oslo_utils import importutils

    from cinder import db
    from cinder.volume import configuration
    from cinder.volume import manager

    config = configuration.Configuration(manager.volume_backend_opts,
                                         config_group=group)
    driver = importutils.import_object(
        config.volume_driver, configuration=config, db=db,
        host=backend_host, cluster_name=cluster_name,
        is_vol_db_empty=False, active_backend_id=None)
    driver.do_setup(ctxt)
    return driver


def run(body, args, stdout, stderr):
    """Load the configuration, run *body(args, stdout)*, map errors.

    *body* returns the exit code or raises :class:`CliError`; Cinder's
    ``NotFound`` maps to 2, its invalid-input errors to 1, anything else
    to 4 (a backend error).
    """
    def fail(code, message):
        stderr.write('cinder-forcedetach: error: %s\n' % message)
        return code

    try:
        load_config(args)
    except CliError as err:
        return fail(err.code, err.message)

    from cinder import coordination
    from cinder import exception

    coordination.COORDINATOR.start()
    try:
        return body(args, stdout)
    except CliError as err:
        return fail(err.code, err.message)
    except (exception.InvalidInput, exception.InvalidVolume,
            exception.InvalidConnectorException) as err:
        return fail(EXIT_USAGE, str(err))
    except exception.NotFound as err:
        return fail(EXIT_NOT_FOUND, str(err))
    except Exception as err:
        return fail(EXIT_BACKEND, '%s failed: %s' % (
            getattr(args, 'what', 'the command'), err))
    finally:
        coordination.COORDINATOR.stop()
