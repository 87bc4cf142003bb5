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
import sys

from cinder_forcedetach.cmd import local

HELP = ('Rebuild an attachment\'s connection_info with its backend\'s '
        'current addresses (runs locally on a volume host, reads '
        'cinder.conf); secrets are masked in the output.')


def add_arguments(parser, with_format=True):
    """The command's arguments, for a parser of ``cinder-forcedetach``.

    *with_format* False: the caller's top-level parser has ``--format``.
    """
    parser.add_argument('attachment', metavar='ATTACHMENT_ID',
                        help='the attachment whose connection_info to '
                             'rebuild')
    local.add_config_arguments(parser, with_format)


def build_parser():
    parser = argparse.ArgumentParser(
        prog='cinder-forcedetach attachment refresh', description=HELP)
    add_arguments(parser)
    return parser


def _refresh(args, stdout):
    from cinder import context
    from cinder import objects

    ctxt = context.get_admin_context()
    attachment = objects.VolumeAttachment.get_by_id(ctxt, args.attachment)
    volume = objects.Volume.get_by_id(ctxt, attachment.volume_id)
    group, backend_host = local.backend_of(volume)
    driver = local.build_driver(ctxt, group, backend_host,
                                volume.cluster_name)
    if not hasattr(driver, 'refresh_connection_info'):
        raise local.CliError(
            local.EXIT_USAGE, 'the driver of volume %s (%s) cannot refresh '
            'connection_info' % (volume.id, type(driver).__name__))
    info = driver.refresh_connection_info(ctxt, attachment)
    local.emit({'attachment_id': attachment.id, 'volume_id': volume.id,
                'connection_info': local.mask_secrets(info)},
               args.format, stdout)
    return local.EXIT_OK


def run(args, stdout=None, stderr=None):
    """Run the command for parsed *args*; returns the exit code."""
    args.what = 'refresh of attachment %s' % args.attachment
    return local.run(_refresh, args, stdout or sys.stdout,
                     stderr or sys.stderr)


def main_refresh(argv=None, stdout=None, stderr=None):
    """Entry point: ``cinder-forcedetach attachment refresh ARGS``."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return local.EXIT_USAGE if exc.code else local.EXIT_OK
    return run(args, stdout, stderr)


if __name__ == '__main__':
    sys.exit(main_refresh(sys.argv[1:]))
