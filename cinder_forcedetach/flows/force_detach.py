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

"""The one teardown order, for every way Cinder detaches and for ours.

========================  ===================================================
caller                    flow
========================  ===================================================
``force_detach``          lock, resolve, record the hosts revoked, notify,
(our CLI, the audit)      disconnect this host, revoke host access, fence,
                          remove export, **reset the DB** (and the record),
                          notify, notify the forced detach, unlock
``terminate_connection``  lock, resolve, record the hosts revoked (bound to
(Cinder: os-force_detach, the attachments that leave), disconnect this
attachment delete,        host, revoke host access, fence, remove export,
its own host copies)      unlock: the same tasks without the database
                          (Cinder updates its own rows afterwards, which
                          ends the record)
``remove_export``         lock, remove export, unlock (one task: no engine)
(Cinder: detach,
attachment delete)
``initialize_connection`` lock, refuse a host whose attachment a force-detach
(Cinder: attachment       ended, cut the holders no live attachment explains
update, legacy attach)    (:mod:`cinder_forcedetach.grant_fence`), grant,
                          unlock (the mixin's wrapper)
``ensure_export``         lock, read the volume again, re-export if still
(Cinder: start-up)        in-use to the hosts still attached (not those an
                          interrupted force-detach recorded), unlock
``run_host`` (a host      ``force_detach``'s flow per volume, each paused
fence: one host leaves    before its fence (its lock held) by one more step,
many volumes)             *join the batch*; one fence of them all (the
                          driver's batch); then each flow resumes: fence
                          (its share of the batch's result), remove export,
                          reset the DB, notify, notify the forced detach,
                          unlock
========================  ===================================================

A caller that forces a detach gives its ``reason``
(:data:`cinder_forcedetach.notifications.REASONS`): once the teardown is
done, one more task (:class:`NotifyForcedTask`, before the unlock) counts
it and sends ``forcedetach.detach.forced`` with the volume, the hosts,
initiators and attachments cut and the clients fenced
(:func:`forced_payload`).  Cinder's ordinary detach gives none.

Which attachments leave is read from what Cinder gives: the connector of
the host (``terminate_connection``), an attachment id (``force_detach``),
or nothing (every host).  Cinder's ``terminate_connection`` without a
connector names no attachment: on a volume with several live attachments
it is refused rather than guessed at; one host's attachment among several
on that host leaves the host's access in place.

Before each step that changes the backend or the database, the lock
service must confirm the lock is still this service's (a lease lost while
etcd was unreachable is not): otherwise the flow stops there, as a failed
step, rather than run unlocked.

Every task is idempotent, so a second run, or a run after a crash at any
step, converges.  No task undoes backend teardown on revert (re-exporting a
volume to a host we are fencing would be the wrong repair); a failure leaves
Cinder's database untouched because the database task is the last one.
"""


from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Iterable, Optional, Sequence, TYPE_CHECKING

from cinder import context as cinder_context
from cinder.db import api as db_api
from cinder import exception
from cinder import flow_utils
from cinder.i18n import _
from cinder import objects
from cinder.objects import fields
from cinder import rpc
from cinder.volume import volume_utils
from oslo_log import log as logging
import taskflow.engines
from taskflow import formatters
from taskflow.listeners import logging as logging_listener
from taskflow.patterns import linear_flow
from taskflow import states
from taskflow.types import failure as taskflow_failure

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import exception as fd_exception
from cinder_forcedetach import locks
from cinder_forcedetach import notifications

if TYPE_CHECKING:
    from taskflow.engines import base as engine_base
    from taskflow import storage as taskflow_storage
    from tooz import locking

    #: A host's connector; None in a list of hosts to revoke: every host.
    Connector = dict[str, Any]
    Revoke = list[Optional[Connector]]
    #: ``(volume, revoke, remaining)`` of a volume that joined a batch.
    FenceRequest = tuple[objects.Volume, Revoke,
                         list[objects.VolumeAttachment]]
    #: ``{volume_id: [addresses fenced] or an exception}``
    FenceMany = Callable[[list[FenceRequest]],
                         dict[str, list[str] | BaseException]]

LOG = logging.getLogger(__name__)

ACTION = 'volume:force_detach'

# Statuses in which a volume may be force-detached: every attach/detach
# state, plus in-use/available/error.  Anything else (creating, deleting,
# downloading, migrating, ...) means another operation owns the backend.
ALLOWED_STATUSES = ('available', 'in-use', 'attaching', 'detaching',
                    'reserved', 'error', 'error_attaching',
                    'error_detaching')


class _DriverTask(flow_utils.CinderTask):
    """A task that works through the driver it was built with."""

    def __init__(self, driver: Any, **kwargs: Any) -> None:
        super(_DriverTask, self).__init__(**kwargs)
        self.driver = driver


class LockVolumeTask(flow_utils.CinderTask):
    """Take the volume's lock across all volume services (tooz)."""

    default_provides = 'lock'

    def execute(self, volume: objects.Volume) -> locking.Lock:
        lock = locks.volume_lock(volume.id)
        lock.acquire(blocking=True)
        return lock

    def revert(self, volume: objects.Volume, result: Any,
               **kwargs: Any) -> None:
        # A failed acquire reverts with taskflow's Failure, not the lock.
        if result is not None and not isinstance(
                result, (Exception, taskflow_failure.Failure)):
            locks.release(result)


class RequireDetachedTask(flow_utils.CinderTask):
    """The reconciler's finding, checked again under the volume's lock.

    It found the volume ``available`` with no live attachment, without
    the lock: an attach may have begun since.  Then nothing is torn down.
    """

    def execute(self, volume: objects.Volume) -> None:
        volume.refresh()    # its attachments too, in the same query
        live = [a for a in volume.volume_attachment
                if fd_attachments.is_live(a)]
        if volume.status != 'available' or live:
            raise exception.InvalidVolume(reason=_(
                'volume %(vol)s changed since it was found detached: status '
                '%(status)s, %(n)d live attachment(s); nothing torn down') % {
                    'vol': volume.id, 'status': volume.status,
                    'n': len(live)})


class ResolveAttachmentsTask(_DriverTask):
    """Check the request; split attachments; say which hosts to revoke.

    :param reset_database: True for our force-detach, which owns the
        volume's state; False on Cinder's ``terminate_connection`` path,
        where Cinder owns it (its own host copies run in ``backing-up``,
        ``downloading``...) and resets its rows itself.
    """

    default_provides = ('detaching', 'remaining', 'revoke')

    def __init__(self, driver: Any, reset_database: bool,
                 **kwargs: Any) -> None:
        super(ResolveAttachmentsTask, self).__init__(driver, **kwargs)
        self.reset_database = reset_database

    def execute(self, context: cinder_context.RequestContext,
                volume: objects.Volume, connector: Optional[Connector],
                attachment_id: Optional[str]
                ) -> tuple[fd_attachments.Attachments,
                           fd_attachments.Attachments, Revoke]:
        volume.refresh()
        if self.reset_database and volume.status not in ALLOWED_STATUSES:
            raise exception.InvalidVolume(
                reason=_('volume status is %(status)s; force-detach needs '
                         'one of %(allowed)s') % {
                    'status': volume.status,
                    'allowed': ', '.join(ALLOWED_STATUSES)})
        if connector is not None:
            self.driver.validate_connector(connector)
        live = [a for a in volume.volume_attachment
                if fd_attachments.is_live(a)]
        if attachment_id:
            detaching = [a for a in live if a.id == attachment_id]
            if not detaching:
                _check_attachment_was_ours(context, volume, attachment_id)
        elif connector is not None:
            detaching = [a for a in live
                         if fd_attachments.same_host(a.connector, connector)]
        else:
            detaching = live
        kept = not self.reset_database and self._host_keeps_access(
            volume, connector, live, detaching)
        if kept:
            detaching = []
        ids = {a.id for a in detaching}
        remaining = [a for a in live if a.id not in ids]
        revoke = [] if kept else connectors_to_revoke(connector, detaching,
                                                      remaining)
        LOG.info('Teardown of volume %(vol)s: %(n)d attachment(s) leave, '
                 '%(m)d stay, %(r)d host(s) revoked.',
                 {'vol': volume.id, 'n': len(detaching), 'm': len(remaining),
                  'r': len(revoke)})
        return (fd_attachments.Attachments(detaching),
                fd_attachments.Attachments(remaining), revoke)

    @staticmethod
    def _host_keeps_access(volume: objects.Volume,
                           connector: Optional[Connector],
                           live: Sequence[objects.VolumeAttachment],
                           detaching: Sequence[objects.VolumeAttachment]
                           ) -> bool:
        """Cinder's ``terminate_connection`` ends one attachment.

        Without a connector it names none: refused when several are live.
        With one, a host that has other attachments keeps its access.
        """
        if connector is None and len(live) > 1:
            raise exception.InvalidInput(reason=_(
                'volume %(vol)s has %(n)d live attachments and Cinder gave '
                'no connector: which host leaves is unknown, nothing was '
                'revoked; give the connector of the host that leaves') % {
                    'vol': volume.id, 'n': len(live)})
        if connector is not None and len(detaching) > 1:
            LOG.info('Volume %(vol)s has %(n)d attachments on host %(host)s;'
                     ' its access is kept.', {'vol': volume.id,
                                              'n': len(detaching),
                                              'host': connector.get('host')})
            return True
        return False


def _check_attachment_was_ours(context: cinder_context.RequestContext,
                               volume: objects.Volume,
                               attachment_id: str) -> None:
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


def connectors_to_revoke(connector: Optional[Connector],
                         detaching: Iterable[objects.VolumeAttachment],
                         remaining: Sequence[objects.VolumeAttachment]
                         ) -> Revoke:
    """Which host connectors lose access; [None] means every host."""
    if connector is not None:
        return [connector]
    if not remaining:
        return [None]
    return [a.connector for a in detaching if a.connector]


class RecordTeardownTask(flow_utils.CinderTask):
    """Record the hosts being revoked before any of them is touched.

    :param reset_database: our force-detach, which clears the record with
        its database reset; on Cinder's ``terminate_connection`` path the
        record is bound to the attachments that leave, and ends when
        Cinder's detach marks them detached (see
        :data:`cinder_forcedetach.attachments.TEARDOWN_MARK`).
    """

    def __init__(self, reset_database: bool, **kwargs: Any) -> None:
        super(RecordTeardownTask, self).__init__(**kwargs)
        self.reset_database = reset_database

    def execute(self, context: cinder_context.RequestContext,
                volume: objects.Volume, revoke: Revoke,
                detaching: Sequence[objects.VolumeAttachment]) -> None:
        if not revoke:
            return
        if not self.reset_database and not detaching:
            return      # no attachment of Cinder's leaves: nothing to bind
        try:
            record = fd_attachments.teardown_record(
                revoke, None if self.reset_database else
                [a.id for a in detaching])
        except ValueError as err:
            raise exception.InvalidInput(reason=_(
                'cannot record the teardown of volume %(vol)s, nothing was '
                'revoked: %(err)s') % {'vol': volume.id, 'err': err})
        # Cinder's detach runs with the user's context (a member detaching
        # a server's volume through Nova); admin metadata needs an admin.
        with volume.obj_as_admin():
            volume.admin_metadata_update(
                {fd_attachments.TEARDOWN_MARK: record}, False)


class NotifyTask(_DriverTask):
    """Emit ``detach.start``/``detach.end``, as Cinder's detach does."""

    def __init__(self, driver: Any, event: str, **kwargs: Any) -> None:
        super(NotifyTask, self).__init__(driver, addons=[event], **kwargs)
        self.event = event

    def execute(self, context: cinder_context.RequestContext,
                volume: objects.Volume) -> None:
        if not rpc.initialized():
            return      # a process without messaging (the operator CLI)
        try:
            volume_utils.notify_about_volume_usage(
                context, volume, self.event,
                host=getattr(self.driver, 'host', None))
        except Exception:
            LOG.warning('Could not notify %(event)s of volume %(vol)s.',
                        {'event': self.event, 'vol': volume.id},
                        exc_info=True)


class DisconnectLocalHostTask(_DriverTask):
    """Disconnect this host's own connection (os-brick, force) first.

    It runs before the backend revokes access so that os-brick can still
    flush buffered writes on a path that is up.
    """

    def execute(self, volume: objects.Volume, connector: Optional[Connector],
                detaching: Sequence[objects.VolumeAttachment],
                revoke: Revoke, lock: Optional[locking.Lock]) -> None:
        locks.check_lock(lock, volume, type(self).__name__)
        if revoke:
            self.driver.disconnect_local_host(volume, connector, detaching)


class RevokeHostAccessTask(_DriverTask):
    """Terminate the backend connections of the hosts that leave."""

    def execute(self, volume: objects.Volume, revoke: Revoke,
                lock: Optional[locking.Lock]) -> None:
        locks.check_lock(lock, volume, type(self).__name__)
        for host_connector in revoke:
            self.driver.revoke_host_access(volume, host_connector)


class JoinBatchFenceTask(flow_utils.CinderTask):
    """Join the fence of many volumes at once, and pause until it is done.

    Only in :func:`run_host`'s flows: the volume's request goes into the
    :class:`FenceBatch`, whose ``join`` suspends this flow's engine once
    this step is done; the lock stays held.
    """

    def __init__(self, batch: FenceBatch, **kwargs: Any) -> None:
        super(JoinBatchFenceTask, self).__init__(**kwargs)
        self.batch = batch

    def execute(self, volume: objects.Volume, revoke: Revoke,
                remaining: list[objects.VolumeAttachment]) -> None:
        if revoke:
            self.batch.join(volume, revoke, remaining)


class FenceClientsTask(_DriverTask):
    """Cut off clients that still hold the volume (driver hook).

    Provides the client addresses fenced (``fenced``).

    :param batch: a :class:`FenceBatch` that fenced this volume already
        (it has its result): that result is this step's, a failure
        included; otherwise the driver's ``fence_clients``.
    """

    default_provides = 'fenced'

    def __init__(self, driver: Any, batch: Optional[FenceBatch] = None,
                 **kwargs: Any) -> None:
        super(FenceClientsTask, self).__init__(driver, **kwargs)
        self.batch = batch

    def execute(self, volume: objects.Volume, revoke: Revoke,
                remaining: list[objects.VolumeAttachment],
                lock: Optional[locking.Lock]) -> list[str]:
        locks.check_lock(lock, volume, type(self).__name__)
        if not revoke:
            return []
        if self.batch is not None and self.batch.has_result(volume.id):
            return list(self.batch.result(volume.id) or [])
        return list(self.driver.fence_clients(volume, revoke, remaining) or
                    [])


class RemoveExportTask(_DriverTask):
    """Remove the export when no remaining attachment still uses it.

    :param always: Cinder's own ``remove_export`` call: the driver decides
        whether another host still uses the export.
    """

    def __init__(self, driver: Any, always: bool = False,
                 **kwargs: Any) -> None:
        super(RemoveExportTask, self).__init__(driver, **kwargs)
        self.always = always

    def execute(self, context: cinder_context.RequestContext,
                volume: objects.Volume,
                remaining: Iterable[objects.VolumeAttachment] = (),
                lock: Optional[locking.Lock] = None) -> None:
        locks.check_lock(lock, volume, type(self).__name__)
        users = fd_attachments.export_users(remaining)
        if users and not self.always:
            LOG.info('Volume %(vol)s keeps its export for %(n)d other '
                     'attachment(s).', {'vol': volume.id, 'n': len(users)})
            return
        self.driver.remove_export_unlocked(context, volume)


class ResetDatabaseTask(flow_utils.CinderTask):
    """Only now reset Cinder's attachments and volume status."""

    def execute(self, context: cinder_context.RequestContext,
                volume: objects.Volume,
                detaching: Sequence[objects.VolumeAttachment],
                attachment_id: Optional[str],
                lock: Optional[locking.Lock]) -> None:
        locks.check_lock(lock, volume, type(self).__name__)
        ids = [a.id for a in detaching] or (
            [attachment_id] if attachment_id else [])
        # finish_detach updates the object as it updates the rows.
        for att_id in ids:
            volume.finish_detach(att_id)
        if not ids:
            volume.refresh()
            if not volume.volume_attachment and (
                    volume.status != 'available' or
                    volume.attach_status !=
                    fields.VolumeAttachStatus.DETACHED):
                volume.update({
                    'status': 'available',
                    'attach_status': fields.VolumeAttachStatus.DETACHED})
                volume.save()
        if fd_attachments.hosts_in_teardown(volume) is not None:
            db_api.volume_admin_metadata_delete(context.elevated(), volume.id,
                                                fd_attachments.TEARDOWN_MARK)
        LOG.info('Force-detach of volume %(vol)s done: status %(status)s.',
                 {'vol': volume.id, 'status': volume.status})


#: Connector fields a forced detach's notification names the hosts by:
#: ``{field: payload key}`` (never anything else of a connector).
_CONNECTOR_NAMES = {'initiator': 'initiators', 'nqn': 'initiators',
                    'wwpns': 'initiators', 'ip': 'ips'}


def forced_payload(volume: objects.Volume, revoke: Revoke,
                   detaching: Sequence[objects.VolumeAttachment],
                   attachment_id: Optional[str] = None,
                   fenced: Optional[Iterable[str]] = None
                   ) -> dict[str, Any]:
    """The ``forcedetach.detach.forced`` payload of a teardown.

    ``hosts``, ``initiators`` (iSCSI IQN, NVMe NQN, FC WWPNs) and ``ips``
    of the hosts cut (with ``all_hosts``, every host: named by the
    attachments that ended), the ``attachment_ids`` that ended and the
    client addresses ``fenced``.  Read from the connectors' names only:
    never an attachment's connection_info or the volume's provider_auth.
    """
    every = None in revoke
    connectors = [c for c in revoke if c] or (
        [a.connector for a in detaching if a.connector] if every else [])
    named: dict[str, set[str]] = {'hosts': set(), 'initiators': set(),
                                  'ips': set()}
    for connector in connectors:
        values: list[tuple[str, Any]] = [('hosts', connector.get('host'))]
        for field, key in _CONNECTOR_NAMES.items():
            value = connector.get(field)
            values += [(key, v) for v in (
                value if isinstance(value, (list, tuple)) else [value])]
        for key, value in values:
            if isinstance(value, str) and value:
                named[key].add(value)
    ids = [a.id for a in detaching] or (
        [attachment_id] if attachment_id else [])
    payload: dict[str, Any] = {'volume_id': volume.id, 'all_hosts': every}
    payload.update((key, sorted(values)) for key, values in named.items())
    payload.update(attachment_ids=sorted(ids),
                   fenced=sorted(fenced or []))
    return payload


class NotifyForcedTask(_DriverTask):
    """Count the forced detach and send ``forcedetach.detach.forced``.

    Once the teardown is done (and the database reset, where the flow
    resets it), before the unlock; nothing when no host was revoked (a
    host that keeps its access).  *details*, from the caller's store, go
    into the payload too.
    """

    def __init__(self, driver: Any, reason: str, **kwargs: Any) -> None:
        super(NotifyForcedTask, self).__init__(driver, addons=[reason],
                                               **kwargs)
        self.reason = reason

    def execute(self, context: cinder_context.RequestContext,
                volume: objects.Volume, revoke: Revoke,
                detaching: Sequence[objects.VolumeAttachment],
                attachment_id: Optional[str] = None,
                fenced: Optional[list[str]] = None,
                forced_details: Optional[dict[str, Any]] = None) -> None:
        if not revoke:
            return
        payload = dict(forced_details or {}, **forced_payload(
            volume, revoke, detaching, attachment_id, fenced))
        notifications.detach_forced(context,
                                    getattr(self.driver, 'host', None),
                                    self.reason, payload)


class ReleaseLockTask(flow_utils.CinderTask):
    def execute(self, lock: locking.Lock) -> None:
        locks.release(lock)


def get_flow(driver: Any, reset_database: bool = True,
             batch: Optional[FenceBatch] = None,
             require_detached: bool = False,
             reason: Optional[str] = None) -> linear_flow.Flow:
    """Our force-detach (reset_database) or Cinder's terminate_connection.

    *batch*: a :class:`FenceBatch` the flow joins, and waits for, before
    its fence step (:func:`run_host`).  *require_detached*: the
    reconciler's teardown of a volume found available with no attachment
    (:class:`RequireDetachedTask`).  *reason*: a forced detach's
    (:class:`NotifyForcedTask`); None: an ordinary detach.
    """
    flow = linear_flow.Flow(ACTION.replace(':', '_'))
    flow.add(LockVolumeTask())
    if require_detached:
        flow.add(RequireDetachedTask())
    flow.add(ResolveAttachmentsTask(driver, reset_database))
    flow.add(RecordTeardownTask(reset_database))
    if reset_database:
        flow.add(NotifyTask(driver, 'detach.start'))
    flow.add(DisconnectLocalHostTask(driver),
             RevokeHostAccessTask(driver))
    if batch is not None:
        flow.add(JoinBatchFenceTask(batch))
    flow.add(FenceClientsTask(driver, batch),
             RemoveExportTask(driver))
    if reset_database:
        flow.add(ResetDatabaseTask(), NotifyTask(driver, 'detach.end'))
    if reason:
        flow.add(NotifyForcedTask(driver, reason))
    flow.add(ReleaseLockTask())
    return flow


#: Flow inputs a failure's log must not print: a Volume's repr holds its
#: provider_auth (the CHAP password), an attachment's its connection_info
#: (the same password), a context its token.
SECRET_INPUTS = ('volume', 'context', 'detaching', 'remaining')


def _load(flow: linear_flow.Flow, store: dict[str, Any]
          ) -> tuple[engine_base.Engine,
                     logging_listener.DynamicLoggingListener]:
    """``(engine, listener)`` of *flow* with *store*."""
    engine = taskflow.engines.load(flow, engine='serial', store=store)
    # Cinder's DynamicLogListener, but a failure's report of the earlier
    # steps (their inputs) masks the SECRET_INPUTS.
    listener = logging_listener.DynamicLoggingListener(
        engine, log=LOG, fail_formatter=formatters.FailureFormatter(
            engine, mask_inputs_keys=SECRET_INPUTS))
    return engine, listener


def _run(flow: linear_flow.Flow, volume: objects.Volume,
         store: dict[str, Any]) -> taskflow_storage.Storage:
    return _run_engine(*_load(flow, store), volume)


def _run_engine(engine: engine_base.Engine,
                listener: logging_listener.DynamicLoggingListener,
                volume: objects.Volume) -> taskflow_storage.Storage:
    """Run (or resume) *engine*; a failure is raised naming its step."""
    try:
        with listener:
            engine.run()
    except (exception.Invalid, exception.NotFound,
            exception.InvalidConnectorException):
        raise
    except Exception as err:
        failures = engine.storage.get_execute_failures()
        step = next(iter(failures), 'unknown').replace(__name__ + '.', '')
        LOG.error('Teardown of volume %(vol)s failed at %(step)s; '
                  'database unchanged.', {'vol': volume.id, 'step': step})
        raise fd_exception.ForceDetachFailed(
            volume_id=volume.id, step=step, reason=err) from err
    return engine.storage


def run(context: cinder_context.RequestContext, driver: Any,
        volume: objects.Volume, connector: Optional[Connector] = None,
        attachment_id: Optional[str] = None, reset_database: bool = True,
        require_detached: bool = False, reason: Optional[str] = None,
        details: Optional[dict[str, Any]] = None) -> bool:
    """Run the flow; returns whether another host may use the export.

    Cinder then keeps the export: attachments remain that have a connector.

    *reason*: this teardown is a forced detach
    (:data:`cinder_forcedetach.notifications.REASONS`): once done it is
    counted and notified, with *details* (ids and names only) in the
    payload.  None: an ordinary detach, neither counted nor notified.

    A backend failure is raised as ``ForceDetachFailed`` naming its step.
    """
    storage = _run(get_flow(driver, reset_database,
                            require_detached=require_detached,
                            reason=reason), volume, {
        'context': context, 'volume': volume, 'connector': connector,
        'attachment_id': attachment_id, 'forced_details': details})
    return bool(fd_attachments.export_users(storage.fetch('remaining')))


class FenceBatch(object):
    """The fence the flows of :func:`run_host` share.

    ``engines`` maps each volume id to its flow's engine; a flow joining
    (:class:`JoinBatchFenceTask`) suspends its engine.  :meth:`fence` then
    fences every joined volume at once; each resumed flow's fence step
    takes its volume's result (:meth:`result`).
    """

    def __init__(self) -> None:
        self.engines: dict[str, engine_base.Engine] = {}
        self.requests: dict[str, FenceRequest] = {}
        #: volume id -> the addresses fenced, or the volume's failure
        self.results: dict[str, Any] = {}
        self.fenced = False

    def join(self, volume: objects.Volume, revoke: Revoke,
             remaining: list[objects.VolumeAttachment]) -> None:
        self.requests[volume.id] = (volume, revoke, remaining)
        self.engines[volume.id].suspend()

    def fence(self, fence_many: FenceMany) -> None:
        """``fence_many([(volume, revoke, remaining)])`` once, for all.

        It returns ``{volume_id: [addresses fenced] or an exception}``;
        a volume it leaves out is fenced alone by the driver's
        ``fence_clients`` when its flow resumes.  If it raises, every
        joined volume fails with that error.
        """
        pending = [self.requests[vid] for vid in sorted(self.requests)
                   if vid not in self.results]
        if pending:
            try:
                results = fence_many(pending)
            except Exception as err:
                LOG.error('The fence of %(n)d volume(s) failed: %(err)s',
                          {'n': len(pending), 'err': err})
                results = {volume.id: err for volume, _r, _k in pending}
            self.results.update(results)
        self.fenced = True

    def abort(self, reason: str) -> None:
        """Fail every joined volume, unless :meth:`fence` ran."""
        if self.fenced:
            return
        for vid in self.requests:
            self.results.setdefault(vid, exception.VolumeBackendAPIException(
                data=reason))

    def has_result(self, volume_id: str) -> bool:
        return volume_id in self.results

    def result(self, volume_id: str) -> list[str]:
        """The addresses fenced for *volume_id*; raise its failure."""
        result = self.results[volume_id]
        if isinstance(result, BaseException):
            raise result
        return result


#: What :func:`run_host` returns: ``done`` is ``{volume_id: [client
#: addresses fenced]}`` of the volumes torn down (their database reset),
#: ``failed`` is ``{volume_id: exception}`` of those left as they were in
#: Cinder's database; ``seconds`` is ``(flows up to the fence, the fence,
#: flows after it)``.
HostTeardown = collections.namedtuple('HostTeardown', 'done failed seconds')


def run_host(context: cinder_context.RequestContext, driver: Any,
             volumes: Iterable[objects.Volume], connector: Connector,
             fence_many: FenceMany,
             reason: str = notifications.HOST) -> HostTeardown:
    """Our force-detach of one host from many volumes, the fence batched.

    Each volume runs this module's flow (:func:`get_flow`, as
    :func:`run` does with *connector*) with one more step before its
    fence, :class:`JoinBatchFenceTask`: the flow pauses there, its lock
    held, its host recorded, revoked and the local connection gone.  When
    every volume has paused (or failed), *fence_many* fences them all at
    once (:meth:`FenceBatch.fence`); then each flow resumes: its fence step
    takes its volume's share of the result (a failure fails that flow
    there: database untouched, lock released by the revert), then remove
    export, database reset, notification, unlock, in the flow's own order.

    Locks are taken in volume id order: two host fences over shared
    (multiattach) volumes cannot wait for each other's.  A volume listed
    twice runs once.  Each volume done is a forced detach of *reason*
    (counted and notified, :class:`NotifyForcedTask`).

    :returns: :data:`HostTeardown`.
    """
    batch = FenceBatch()
    done: dict[str, list[str]] = {}
    failed: dict[str, Exception] = {}
    paused: list[tuple[objects.Volume, engine_base.Engine,
                       logging_listener.DynamicLoggingListener]] = []
    ordered = sorted({v.id: v for v in volumes}.values(),
                     key=lambda v: v.id)
    times = [time.monotonic()]
    # One flow, an engine per volume.
    flow = get_flow(driver, True, batch, reason=reason)
    try:
        for volume in ordered:
            engine, listener = _load(flow, {
                'context': context, 'volume': volume,
                'connector': connector, 'attachment_id': None,
                'forced_details': None})
            batch.engines[volume.id] = engine
            try:
                _run_engine(engine, listener, volume)
            except Exception as err:
                failed[volume.id] = err
                continue
            if engine.storage.get_flow_state() == states.SUSPENDED:
                paused.append((volume, engine, listener))
            else:
                done[volume.id] = []
        times.append(time.monotonic())
        batch.fence(fence_many)
        times.append(time.monotonic())
    finally:
        batch.abort(_('the host fence was interrupted before it fenced '
                      'this volume'))
        for volume, engine, listener in paused:
            try:
                _run_engine(engine, listener, volume)
            except Exception as err:
                failed[volume.id] = err
            else:
                done[volume.id] = list(batch.results.get(volume.id) or [])
    times.append(time.monotonic())
    seconds = tuple(b - a for a, b in zip(times, times[1:]))
    LOG.info('Force-detach of host %(host)s from %(n)d volume(s): %(ok)d '
             'done, %(bad)d failed (database unchanged)%(ids)s; %(steps)s.',
             {'host': (connector or {}).get('host'), 'n': len(ordered),
              'ok': len(done), 'bad': len(failed),
              'ids': (': ' + ', '.join(sorted(failed))) if failed else '',
              'steps': ', '.join('%s %.2f s' % step for step in zip(
                  ('flows to the fence', 'fence', 'flows after it'),
                  seconds))})
    return HostTeardown(done, failed, seconds)


def run_remove_export(context: cinder_context.RequestContext, driver: Any,
                      volume: objects.Volume) -> None:
    """Cinder's own ``remove_export`` call: the same task, the same lock.

    Cinder read *volume* before this lock was taken: another service may
    have granted a host since.  So whether a live attachment still uses
    the export is read again under the lock.  One task needs no engine
    (loading one costs ~10 ms a volume).
    """
    with locks.held(volume.id) as lock:
        try:
            volume = objects.Volume.get_by_id(context, volume.id)
        except exception.VolumeNotFound:
            pass    # deleted meanwhile: Cinder's object is all there is
        RemoveExportTask(driver, always=True).execute(context, volume,
                                                      lock=lock)


def revoke_after_detach(driver: Any, volume: objects.Volume,
                        live: Iterable[objects.VolumeAttachment],
                        wait_seconds: float,
                        reason: Optional[str] = None) -> bool:
    """Revoke the host of the attachment Cinder's detach ends next.

    ``os-force_detach {attachment_id}`` without a connector calls
    ``terminate_connection(volume, None)``, which names no attachment, and
    then the manager's ``detach_volume``, which ends the named attachment
    (``finish_detach``) with no driver call that names it.  So nothing is
    revoked now (True: the export stays, as Cinder's return value means);
    a watcher waits, up to *wait_seconds*, for one of the *live*
    attachments to end, and then runs this flow (without the database)
    for the connector stored on it, unless its host keeps another live
    attachment.  Where nothing names an attachment Cinder's detach refuses
    (400) and nothing ends.  *reason*: that run's (see :func:`run`).
    """
    ids = frozenset(a.id for a in live)
    LOG.info('Volume %(vol)s: %(n)d live attachments and no connector; the '
             'host of the attachment Cinder detaches next is revoked then.',
             {'vol': volume.id, 'n': len(ids)})
    threading.Thread(target=_revoke_ended, daemon=True,
                     args=(driver, volume.id, ids, wait_seconds,
                           reason)).start()
    return True


def _ended_attachments(context: cinder_context.RequestContext,
                       volume_id: str, live_ids: frozenset[str],
                       wait_seconds: float) -> list[str]:
    """Ids of *live_ids* that ended within *wait_seconds* (polled)."""
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
        still = {a.id for a in objects.VolumeAttachmentList.
                 get_all_by_volume_id(context, volume_id)
                 if fd_attachments.is_live(a)}
        if live_ids - still:
            return sorted(live_ids - still)
    return []


def _revoke_ended(driver: Any, volume_id: str, live_ids: frozenset[str],
                  wait_seconds: float, reason: Optional[str] = None) -> None:
    context = cinder_context.get_admin_context()
    try:
        ended = _ended_attachments(context, volume_id, live_ids,
                                   wait_seconds)
    except Exception as err:
        LOG.warning('Volume %(vol)s: cannot read its attachments (%(err)s);'
                    ' nothing revoked.', {'vol': volume_id, 'err': err})
        return
    if not ended:
        LOG.info('Volume %s: no attachment was detached after '
                 'terminate_connection without a connector; nothing '
                 'revoked.', volume_id)
    deleted = context.elevated(read_deleted='yes')
    for attachment_id in ended:
        try:
            old = objects.VolumeAttachment.get_by_id(deleted, attachment_id)
            volume = objects.Volume.get_by_id(context, volume_id)
            if not old.connector or any(
                    fd_attachments.is_live(a) and
                    fd_attachments.same_host(a.connector, old.connector)
                    for a in volume.volume_attachment):
                LOG.info('Volume %(vol)s: the host of attachment %(att)s '
                         'keeps another attachment (or never connected); '
                         'nothing to revoke.',
                         {'vol': volume_id, 'att': attachment_id})
                continue
            run(context, driver, volume, connector=old.connector,
                reset_database=False, reason=reason)
        except Exception:
            LOG.exception('Volume %(vol)s: revoking the host of detached '
                          'attachment %(att)s failed; it may still reach '
                          'the volume (the reconciler and the next grant '
                          'cut it).', {'vol': volume_id,
                                       'att': attachment_id})
