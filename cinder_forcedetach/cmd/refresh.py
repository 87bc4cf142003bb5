#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

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


from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd.errors import EXIT_OK
from cinder_forcedetach.cmd.errors import EXIT_USAGE
from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import output
from cinder_forcedetach.cmd import registry
from cinder_forcedetach.cmd.registry import arg

HELP = ('Rebuild an attachment\'s connection_info with its backend\'s '
        'current addresses (runs locally on a volume host, reads '
        'cinder.conf); secrets are masked in the output.')


@registry.command(
    'attachment', 'refresh', HELP, local=True,
    what='refresh of attachment {attachment}',
    arguments=[arg('attachment', metavar='ATTACHMENT_ID',
                   help='the attachment whose connection_info to rebuild')])
def attachment_refresh(conf, args, out):
    """Rebuild and store the connection_info; print it masked."""
    from cinder import context
    from cinder import objects

    ctxt = context.get_admin_context()
    attachment = objects.VolumeAttachment.get_by_id(ctxt, args.attachment)
    volume = objects.Volume.get_by_id(ctxt, attachment.volume_id)
    group, backend_host = local.backend_of(volume)
    driver = local.build_driver(ctxt, group, backend_host,
                                volume.cluster_name)
    if not hasattr(driver, 'refresh_connection_info'):
        raise CliError(EXIT_USAGE, 'the driver of volume %s (%s) cannot '
                       'refresh connection_info' % (
                           volume.id, type(driver).__name__))
    info = driver.refresh_connection_info(ctxt, attachment)
    out.emit({'attachment_id': attachment.id, 'volume_id': volume.id,
              'connection_info': output.mask_secrets(info)})
    return EXIT_OK
