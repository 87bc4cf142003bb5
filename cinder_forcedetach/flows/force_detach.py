"""The force-detach flow: tear the backend down, then reset Cinder's state.

Every task is idempotent, so a second run, or a run after a crash at any
step, converges.  No task undoes backend teardown on revert (re-exporting a
volume to a host we are fencing would be the wrong repair); a failure leaves
Cinder's database untouched because the database task is the last one.
"""

from cinder import coordination
from cinder import exception
from cinder import flow_utils
from cinder.i18n import _
from cinder import objects
from cinder.objects import fields
from oslo_log import log as logging
import taskflow.engines
from taskflow.patterns import linear_flow

from cinder_forcedetach import exception as fd_exception

LOG = logging.getLogger(__name__)

ACTION = 'volume:force_detach'

# Statuses in which a volume may be force-detached: every attach/detach
# state, plus in-use/available/error.  Anything else (creating, deleting,
# downloading, migrating, ...) means another operation owns the backend.
ALLOWED_STATUSES = ('available', 'in-use', 'attaching', 'detaching',
                    'reserved', 'error', 'error_attaching',
                    'error_detaching')
ENDED_ATTACH_STATUSES = (fields.VolumeAttachStatus.DETACHED,
                         fields.VolumeAttachStatus.DELETED)


def is_live(attachment):
    """Whether an attachment still (or may still) reaches the backend."""
    return attachment.attach_status not in ENDED_ATTACH_STATUSES


class Attachments(list):
    """Attachments passed between tasks; shown by id only.

    Taskflow's listener logs task results: the attachments' connection_info
    holds CHAP passwords, which must not reach the logs.
    """

    def __repr__(self):
        return 'Attachments(%s)' % ', '.join(a.id for a in self)

    __str__ = __repr__


def lock_name(volume_id):
    """Name of the coordination lock that serialises force-detach."""
    return 'cinder-forcedetach-%s' % volume_id


class LockVolumeTask(flow_utils.CinderTask):
    """Take the volume's lock across all volume services (tooz)."""

    default_provides = 'lock'

    def execute(self, volume):
        lock = coordination.COORDINATOR.get_lock(lock_name(volume.id))
        lock.acquire(blocking=True)
        return lock

    def revert(self, volume, result, **kwargs):
        if result is not None and not isinstance(result, Exception):
            _release(result)


def _release(lock):
    try:
        lock.release()
    except Exception:  # tooz raises when the lock is no longer held.
        LOG.debug('Force-detach lock was already released.')


class ResolveAttachmentsTask(flow_utils.CinderTask):
    """Check the request and split attachments into detaching/remaining."""

    default_provides = ('detaching', 'remaining')

    def execute(self, context, driver, volume, connector, attachment_id):
        volume.refresh()
        if volume.status not in ALLOWED_STATUSES:
            raise exception.InvalidVolume(
                reason=_('volume status is %(status)s; force-detach needs '
                         'one of %(allowed)s') % {
                    'status': volume.status,
                    'allowed': ', '.join(ALLOWED_STATUSES)})
        if connector is not None:
            if not isinstance(connector, dict):
                raise exception.InvalidConnectorException(
                    missing=_('a connector dictionary (got %s)') %
                    type(connector).__name__)
            driver.validate_connector(connector)

        attachments = [a for a in objects.VolumeAttachmentList.
                       get_all_by_volume_id(context, volume.id)
                       if is_live(a)]
        if attachment_id:
            detaching = [a for a in attachments if a.id == attachment_id]
            if not detaching:
                _check_attachment_was_ours(context, volume, attachment_id)
        elif connector is not None:
            detaching = [a for a in attachments
                         if same_host(a.connector, connector)]
        else:
            detaching = attachments
        detaching_ids = {a.id for a in detaching}
        remaining = [a for a in attachments if a.id not in detaching_ids]
        LOG.info('Force-detach of volume %(vol)s: %(n)d attachment(s) to '
                 'detach, %(m)d kept.', {'vol': volume.id,
                                         'n': len(detaching),
                                         'm': len(remaining)})
        return Attachments(detaching), Attachments(remaining)


def _check_attachment_was_ours(context, volume, attachment_id):
    """Accept a deleted attachment of this volume (a re-run); else fail."""
    try:
        old = objects.VolumeAttachment.get_by_id(
            context.elevated(read_deleted='yes'), attachment_id)
    except exception.VolumeAttachmentNotFound:
        raise exception.VolumeAttachmentNotFound(
            _('Attachment %(att)s does not exist for volume %(vol)s.') %
            {'att': attachment_id, 'vol': volume.id})
    if old.volume_id != volume.id:
        raise exception.InvalidVolume(
            reason=_('attachment %(att)s belongs to volume %(other)s, not '
                     '%(vol)s') % {'att': attachment_id,
                                   'other': old.volume_id, 'vol': volume.id})
    LOG.info('Attachment %s is already detached; re-running the backend '
             'teardown only.', attachment_id)


def same_host(attachment_connector, connector):
    if not attachment_connector:
        return False
    for key in ('host', 'initiator'):
        if attachment_connector.get(key) and (
                attachment_connector.get(key) == connector.get(key)):
            return True
    wwpns = set(attachment_connector.get('wwpns') or [])
    return bool(wwpns & set(connector.get('wwpns') or []))


def connectors_to_revoke(connector, detaching, remaining):
    """Which host connectors lose access; [None] means every host."""
    if connector is not None:
        return [connector]
    if not remaining:
        return [None]
    return [a.connector for a in detaching if a.connector]


class DisconnectLocalHostTask(flow_utils.CinderTask):
    """Disconnect this host's own connection (os-brick, force) first.

    It runs before the backend revokes access so that os-brick can still
    flush buffered writes on a path that is up.
    """

    def execute(self, driver, volume, connector, detaching):
        driver.disconnect_local_host(volume, connector, detaching)


class RevokeHostAccessTask(flow_utils.CinderTask):
    """Terminate the backend connections of the hosts being detached."""

    default_provides = 'revoked'

    def execute(self, driver, volume, connector, detaching, remaining):
        revoked = connectors_to_revoke(connector, detaching, remaining)
        for host_connector in revoked:
            driver.revoke_host_access(volume, host_connector)
        return revoked


class FenceClientsTask(flow_utils.CinderTask):
    """Cut off clients that still hold the volume (driver hook)."""

    def execute(self, driver, volume, revoked, remaining):
        driver.fence_clients(volume, revoked, remaining)


class RemoveExportTask(flow_utils.CinderTask):
    """Remove the export when no remaining attachment still uses it."""

    def execute(self, context, driver, volume, remaining):
        if remaining:
            LOG.info('Volume %(vol)s keeps its export for %(n)d other '
                     'attachment(s).', {'vol': volume.id, 'n': len(remaining)})
            return
        driver.remove_export(context, volume)


class ResetDatabaseTask(flow_utils.CinderTask):
    """Only now reset Cinder's attachments and volume status."""

    def execute(self, context, volume, detaching, attachment_id):
        ids = [a.id for a in detaching] or (
            [attachment_id] if attachment_id else [])
        for att_id in ids:
            volume.finish_detach(att_id)
        volume.refresh()
        if not ids and not volume.volume_attachment and (
                volume.status != 'available' or
                volume.attach_status != fields.VolumeAttachStatus.DETACHED):
            volume.update({
                'status': 'available',
                'attach_status': fields.VolumeAttachStatus.DETACHED})
            volume.save()
        LOG.info('Force-detach of volume %(vol)s done: status %(status)s.',
                 {'vol': volume.id, 'status': volume.status})


class ReleaseLockTask(flow_utils.CinderTask):
    def execute(self, lock):
        _release(lock)


def get_flow(driver):
    """The force-detach flow, in the order its steps must happen."""
    flow = linear_flow.Flow(ACTION.replace(':', '_'))
    flow.add(LockVolumeTask(),
             ResolveAttachmentsTask(),
             DisconnectLocalHostTask(),
             RevokeHostAccessTask(),
             FenceClientsTask(),
             RemoveExportTask(),
             ResetDatabaseTask(),
             ReleaseLockTask())
    return flow


def run(context, driver, volume, connector=None, attachment_id=None):
    """Run the flow; wrap a backend failure with the name of its step."""
    engine = taskflow.engines.load(
        get_flow(driver), engine='serial',
        store={'context': context, 'driver': driver, 'volume': volume,
               'connector': connector, 'attachment_id': attachment_id})
    try:
        with flow_utils.DynamicLogListener(engine, logger=LOG):
            engine.run()
    except (exception.Invalid, exception.NotFound,
            exception.InvalidConnectorException):
        raise
    except Exception as err:
        failures = engine.storage.get_execute_failures()
        step = next(iter(failures), 'unknown').rsplit('.', 1)[-1]
        LOG.error('Force-detach of volume %(vol)s failed at %(step)s; '
                  'database unchanged.', {'vol': volume.id, 'step': step})
        raise fd_exception.ForceDetachFailed(
            volume_id=volume.id, step=step, reason=err) from err
