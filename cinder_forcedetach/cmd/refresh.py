"""``cinder-forcedetach attachment refresh``: rebuild a stale connection_info.

Usage::

    cinder-forcedetach attachment refresh [--config-file FILE]...
        [--config-dir DIR] [--format table|json] [--debug] ATTACHMENT_ID

Like ``cinder-manage``, it runs on a volume host, not against the API: it
reads cinder.conf (default ``/etc/cinder/cinder.conf``), opens Cinder's
database, builds the volume driver of the backend that holds the
attachment's volume (the ``@backend`` part of the volume's host, or
``[backend_defaults]``), and calls the driver's
``refresh_connection_info``: :meth:`initialize_connection` runs again with
the connector stored on the attachment and the result replaces the stored
connection_info (an RBD attachment gets the monitors' current addresses,
an iSCSI one the current portal).  The new connection_info is printed with
secrets masked.  Nova still has to pick it up (``nova-manage
volume_attachment refresh``, or a hard reboot of the instance).

Exit codes, as ``cinder-forcedetach``: 0 success, 1 usage error or bad
input (no config file, an attachment without a live connector), 2 not
found, 4 backend error.
"""

import argparse
import json
import logging as std_logging
import re
import sys

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_NOT_FOUND = 2
EXIT_BACKEND = 4

HELP = ('Rebuild an attachment\'s connection_info with its backend\'s '
        'current addresses (runs locally on a volume host, reads '
        'cinder.conf); secrets are masked in the output.')
DEFAULT_CONFIG = '/etc/cinder/cinder.conf'
MASK = '***'
# Values that are secrets: CHAP passwords, keys, keyrings, tokens.  Not
# secret_uuid/secret_type, which only name a libvirt secret.
SECRET_RE = re.compile(r'(pass(word|wd)?|token|credential|keyring|^key$|'
                       r'_key$|^secret$)', re.IGNORECASE)


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


def emit(data, fmt, stream):
    if fmt == 'json':
        stream.write(json.dumps(data, indent=2, sort_keys=True) + '\n')
        return
    rows = _rows(data)
    kw = max([len('Property')] + [len(k) for k, _v in rows])
    vw = max([len('Value')] + [len(v) for _k, v in rows])
    line = '+-%s-+-%s-+' % ('-' * kw, '-' * vw)
    out = [line, '| %s | %s |' % ('Property'.ljust(kw), 'Value'.ljust(vw)),
           line]
    out += ['| %s | %s |' % (k.ljust(kw), v.ljust(vw)) for k, v in rows]
    out.append(line)
    stream.write('\n'.join(out) + '\n')


def add_arguments(parser, with_format=True):
    """The command's arguments, for a parser of ``cinder-forcedetach``.

    *with_format* False: the caller's top-level parser has ``--format``.
    """
    parser.add_argument('attachment', metavar='ATTACHMENT_ID',
                        help='the attachment whose connection_info to '
                             'rebuild')
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


def build_parser():
    parser = argparse.ArgumentParser(
        prog='cinder-forcedetach attachment refresh', description=HELP)
    add_arguments(parser)
    return parser


def _load_config(args):
    from oslo_config import cfg
    from oslo_log import log as logging

    from cinder.common import config  # noqa: F401  (registers options)
    from cinder import objects
    from cinder import version

    conf = cfg.CONF
    logging.register_options(conf)
    conf(args=[], project='cinder', version=version.version_string(),
         default_config_files=args.config_file or [DEFAULT_CONFIG],
         default_config_dirs=[args.config_dir] if args.config_dir else [])
    conf.set_override('use_stderr', True)
    conf.set_override('log_file', None)
    conf.set_override('log_dir', None)
    conf.set_override('debug', args.debug)
    logging.setup(conf, 'cinder-forcedetach')
    if not args.debug:
        std_logging.getLogger().setLevel(std_logging.WARNING)
    objects.register_all()
    return conf


def build_driver(ctxt, volume):
    """The volume driver of the backend holding *volume*, set up."""
    from oslo_utils import importutils

    from cinder import db
    from cinder.volume import configuration
    from cinder.volume import manager
    from cinder.volume import volume_utils

    backend_host = volume_utils.extract_host(volume.host, 'backend')
    group = (backend_host.split('@', 1)[1] if '@' in backend_host
             else configuration.SHARED_CONF_GROUP)
    config = configuration.Configuration(manager.volume_backend_opts,
                                         config_group=group)
    driver = importutils.import_object(
        config.volume_driver, configuration=config, db=db,
        host=backend_host, cluster_name=volume.cluster_name,
        is_vol_db_empty=False, active_backend_id=None)
    driver.do_setup(ctxt)
    return driver


def run(args, stdout=None, stderr=None):
    """Run the command for parsed *args*; returns the exit code."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr

    def fail(code, message):
        stderr.write('cinder-forcedetach: error: %s\n' % message)
        return code

    from oslo_config import cfg
    try:
        _load_config(args)
    except (cfg.ConfigFilesNotFoundError, cfg.Error) as err:
        return fail(EXIT_USAGE, 'cannot load the configuration: %s' % err)

    from cinder import context
    from cinder import coordination
    from cinder import exception
    from cinder import objects

    ctxt = context.get_admin_context()
    try:
        attachment = objects.VolumeAttachment.get_by_id(ctxt,
                                                        args.attachment)
        volume = objects.Volume.get_by_id(ctxt, attachment.volume_id)
    except exception.NotFound as err:
        return fail(EXIT_NOT_FOUND, str(err))
    coordination.COORDINATOR.start()
    try:
        driver = build_driver(ctxt, volume)
        if not hasattr(driver, 'refresh_connection_info'):
            return fail(EXIT_USAGE, 'the driver of volume %s (%s) cannot '
                        'refresh connection_info' % (
                            volume.id, type(driver).__name__))
        info = driver.refresh_connection_info(ctxt, attachment)
    except (exception.InvalidInput, exception.InvalidVolume,
            exception.InvalidConnectorException) as err:
        return fail(EXIT_USAGE, str(err))
    except exception.NotFound as err:
        return fail(EXIT_NOT_FOUND, str(err))
    except Exception as err:
        return fail(EXIT_BACKEND, 'refresh of attachment %s failed: %s' % (
            args.attachment, err))
    finally:
        coordination.COORDINATOR.stop()
    emit({'attachment_id': attachment.id, 'volume_id': volume.id,
          'connection_info': mask_secrets(info)}, args.format, stdout)
    return EXIT_OK


def main_refresh(argv=None, stdout=None, stderr=None):
    """Entry point: ``cinder-forcedetach attachment refresh ARGS``."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    return run(args, stdout, stderr)


if __name__ == '__main__':
    sys.exit(main_refresh(sys.argv[1:]))
