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

"""ForceDetachMixin: safe, idempotent force-detach for Cinder BaseVD drivers.

A driver class lists the mixin before its Cinder base class::

    class MyDriver(mixin.ForceDetachMixin, driver.VolumeDriver):
        def revoke_host_access(self, volume: objects.Volume,
                           connector: Optional[dict]) -> bool: ...
        def remove_export(self, context, volume): ...

and gets, all through the one flow of
:mod:`cinder_forcedetach.flows.force_detach`:

* :meth:`force_detach` -- the full flow (lock, disconnect this host, revoke
  host access, fence, remove export, and only then reset Cinder's DB);
* :meth:`fence_host` -- one host (dead or partitioned) off many volumes
  at once, for evacuation: the same flow per volume;
* :meth:`terminate_connection` -- what Cinder's attachment delete and
  ``os-force_detach`` call: the same tasks without the database;
* ``create_export``, ``remove_export``, ``initialize_connection`` and
  ``ensure_export`` under the volume's lock when Cinder calls them;
* :meth:`copy_image_to_volume` -- reimage behind Cinder's image gates.

What a driver implements: :meth:`revoke_host_access` and ``remove_export``
(idempotent: what is gone is success), optionally :meth:`fence_clients`,
:meth:`local_connection_info`, :meth:`image_destination`,
:meth:`open_volume_for_write` and ``discard_volume``.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import types
from typing import (Any, Callable, Iterable, Optional, Protocol,
                    Sequence, TYPE_CHECKING)

from cinder import context as cinder_context
from cinder.db import api as db_api
from cinder import exception
from cinder.i18n import _
from cinder import objects
from cinder.objects import fields
from cinder.volume import configuration
from cinder.volume import volume_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import connector_grammar
from cinder_forcedetach import exception as fd_exception
from cinder_forcedetach.flows import force_detach as force_detach_flow
from cinder_forcedetach import grant_fence
from cinder_forcedetach import image_gates
from cinder_forcedetach import locks
from cinder_forcedetach import notifications
from cinder_forcedetach import reconciler

if TYPE_CHECKING:
    from cinder_forcedetach import host_access

    class VolumeFile(Protocol):
        """What :meth:`ForceDetachMixin.open_volume_for_write` returns.

        A file opened ``r+b``, or e.g. an RBD image
        (:class:`cinder_forcedetach.ceph.rbd_io.ImageFile`).
        """

        def seek(self, offset: int, /) -> int:
            ...

        def write(self, data: bytes, /) -> int:
            ...

        def flush(self) -> None:
            ...

        def close(self) -> None:
            ...

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

force_detach_opts = [
    cfg.BoolOpt('forcedetach_disconnect_local_host',
                default=True,
                help='When a volume being force-detached is attached to '
                     'this volume host itself (image copy, backup, '
                     'migration), disconnect it with os-brick (force, '
                     'ignore errors) before the backend revokes access.'),
    cfg.IntOpt('forcedetach_detach_wait_seconds',
               default=10, min=1,
               help='After terminate_connection without a connector on a '
                    'volume with several live attachments (os-force_detach '
                    'naming only an attachment), how long to wait for '
                    'Cinder\'s detach, which follows at once in the same '
                    'request, to end one of them; its host is then '
                    'revoked.'),
    cfg.IntOpt('forcedetach_device_scan_attempts',
               default=3, min=1,
               help='device_scan_attempts handed to the os-brick connector '
                    'that disconnects a local host connection.'),
]

CONF.register_opts(force_detach_opts,
                   group=configuration.SHARED_CONF_GROUP)

#: Pool capability: ``{reason: forced detaches}`` of this backend since
#: the volume service started (every reason of
#: :data:`cinder_forcedetach.notifications.REASONS`, 0 included).
FORCED_DETACHES = 'forcedetach_forced_detaches'
#: Pool capability: the sum of :data:`FORCED_DETACHES`.
FORCED_DETACHES_TOTAL = 'forcedetach_forced_detaches_total'
#: Pool capability: the backend's active fence records, where the driver
#: counts them (:meth:`ForceDetachMixin.count_fence_records`).
FENCE_RECORDS = 'forcedetach_fence_records'
#: Cinder's volume manager module, whose ``terminate_connection`` (the
#: RPC call of ``os-force_detach`` and of the legacy detach) calls ours.
_MANAGER = 'cinder.volume.manager'
#: Volume statuses in which a ``terminate_connection`` of Cinder's is an
#: operator's ``os-force_detach``: not Cinder's own host copies
#: (``downloading``, ``uploading``, ``backing-up``...).
_FORCED_STATUSES = frozenset(force_detach_flow.ALLOWED_STATUSES)


def _manager_frame(frame: Optional[types.FrameType],
                   depth: int) -> Optional[types.FrameType]:
    """The nearest of *frame* and its *depth* - 1 callers in Cinder's manager.

    Cinder tells a driver neither why it calls nor for which attachment;
    the manager's method that called the driver does.
    """
    for _depth in range(depth):
        if frame is None or frame.f_globals.get('__name__') == _MANAGER:
            return frame
        frame = frame.f_back
    return None


class ForceDetachMixin(object):
    """Force-detach that tears down what the backend really has."""

    # Set by Cinder's driver class, which follows the mixin in the MRO.
    configuration: Any
    _execute: Callable[..., Any]
    local_path: Callable[[objects.Volume], str]
    # Cinder's methods, which __init__ rebinds on the instance (see there).
    create_export: Callable[..., Optional[dict[str, Any]]]
    remove_export: Callable[[cinder_context.RequestContext, objects.Volume],
                            None]
    initialize_connection: Callable[[objects.Volume, dict[str, Any]],
                                    dict[str, Any]]
    ensure_export: Callable[[cinder_context.RequestContext, objects.Volume],
                            Optional[dict[str, Any]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(ForceDetachMixin, self).__init__(*args, **kwargs)
        if getattr(self, 'configuration', None):
            self.configuration.append_config_values(force_detach_opts)
            self.configuration.append_config_values(image_gates.image_opts)
            self.configuration.append_config_values(
                reconciler.reconcile_opts)
        self.reconciler: Optional[reconciler.Reconciler] = None
        # What grants access and what Cinder removes itself (detach,
        # attachment delete, volume delete) run under the volume's lock,
        # the flow's: a grant never lands between a force-detach's steps.
        # Bound here, on the instance, around the most derived method: a
        # driver class's own remove_export (ours, a vendor's) overrides any
        # wrapper the mixin's class could define, and wrapping each class
        # of a super() chain would take the (not reentrant) lock twice.
        self.create_export_unlocked = self.create_export
        self.create_export = self._create_export_locked
        self.remove_export_unlocked = self.remove_export
        self.remove_export = self._remove_export_locked
        self.initialize_connection_unlocked = self.initialize_connection
        self.initialize_connection = self._initialize_connection_locked
        self.ensure_export_unlocked = self.ensure_export
        self.ensure_export = self._ensure_export_locked

    @staticmethod
    def get_driver_options() -> list[cfg.Opt]:
        """The mixin's options; a driver adds its own."""
        return (force_detach_opts + image_gates.image_opts +
                reconciler.reconcile_opts)

    def set_initialized(self) -> None:
        """Cinder's volume service is ready: start the reconciler."""
        # Cinder's driver class, after the mixin in the MRO, has it.
        super(ForceDetachMixin, self).set_initialized()  # type: ignore[misc]
        if self.reconciler is None:
            self.reconciler = reconciler.Reconciler(self).start()

    def get_volume_stats(self, refresh: bool = False) -> dict[str, Any]:
        """Cinder's stats, with our counts in every pool.

        The forced detaches of this backend by reason since the service
        started (:data:`FORCED_DETACHES`, :data:`FORCED_DETACHES_TOTAL`),
        the active fence records where the driver counts them
        (:data:`FENCE_RECORDS`) and, while the reconciler runs (an
        interval of 0 adds nothing), its counts.  Upstream's keys are
        kept as they are.  A driver no volume service runs (no ``host``,
        as in upstream's unit tests) reports upstream's stats alone.
        """
        # Cinder's driver class, after the mixin in the MRO, has it.
        stats = super(ForceDetachMixin,
                      self).get_volume_stats(refresh)  # type: ignore[misc]
        if not stats or not getattr(self, 'host', None):
            return stats
        counts = self.forcedetach_capabilities(refresh)
        if self.reconciler is not None and self.reconciler.running:
            counts.update(self.reconciler.capabilities())
        stats = dict(stats, **counts)
        if stats.get('pools'):
            stats['pools'] = [dict(pool, **counts)
                              for pool in stats['pools']]
        return stats

    def forcedetach_capabilities(self, refresh: bool = True
                                 ) -> dict[str, Any]:
        """The forced-detach counts and fence records, for the pools.

        The fence records are counted again only on *refresh* (Cinder's
        periodic stats report); otherwise the last count is given.  A
        count that fails is logged and left out.
        """
        forced = notifications.forced_counts(getattr(self, 'host', None))
        caps: dict[str, Any] = {FORCED_DETACHES: forced,
                                FORCED_DETACHES_TOTAL: sum(forced.values())}
        records = getattr(self, '_forcedetach_fence_records', None)
        if refresh or records is None:
            try:
                records = self.count_fence_records()
            except Exception as err:
                LOG.warning('Cannot count the fence records: %s', err)
                records = None
            self._forcedetach_fence_records = records
        if records is not None:
            caps[FENCE_RECORDS] = records
        return caps

    def count_fence_records(self) -> Optional[int]:
        """Active fence records of the backend, or None: none to count.

        Read at every stats report: a driver counts them only where it is
        cheap.  Default None (a target's ACL has no fence records).
        """
        return None

    # -- the public entry points ----------------------------------------

    def force_detach(self, context: cinder_context.RequestContext,
                     volume: objects.Volume,
                     connector: Optional[dict[str, Any]] = None,
                     attachment_id: Optional[str] = None,
                     reason: str = notifications.OPERATOR) -> None:
        """Detach *volume* from one host (connector) or all (None).

        Runs the force-detach flow; see
        :mod:`cinder_forcedetach.flows.force_detach`.  Raises
        ``ForceDetachFailed`` naming the failed step, with Cinder's
        database unchanged, when any backend step fails.  Done, it is a
        forced detach of *reason* (counted and notified).
        """
        force_detach_flow.run(context, self, volume, connector=connector,
                              attachment_id=attachment_id, reason=reason)

    def fence_host(self, context: cinder_context.RequestContext,
                   host_connector: dict[str, Any],
                   volumes: Iterable[objects.Volume], ip_wide: bool = False
                   ) -> force_detach_flow.HostTeardown:
        """Force-detach one host (a dead or partitioned one) from *volumes*.

        Each volume runs the force-detach flow as :meth:`force_detach`
        with *host_connector* would (its lock; its database reset only
        after the host is cut; a re-run finds nothing and succeeds), every
        flow paused before its fence so that a driver can fence them all
        at once (the RBD driver overrides this with its one-pass fence).
        Here each volume is fenced alone by :meth:`fence_clients`.  A
        volume that fails keeps its rows; the others go on.

        :param ip_wide: cut the host's whole address; only a driver that
            fences by address can (this one refuses it).
        :returns: :data:`~cinder_forcedetach.flows.force_detach.
            HostTeardown` (``done``, ``failed``, ``seconds``).
        """
        if ip_wide:
            raise exception.InvalidInput(reason=_(
                '%s cannot fence a host\'s whole address (ip_wide)') %
                type(self).__name__)
        self.validate_connector(host_connector)
        return force_detach_flow.run_host(
            context, self, volumes, host_connector, lambda requests: {},
            reason=notifications.HOST)

    #: Connector fields this driver cannot work without.
    required_connector_fields: tuple[str, ...] = ()

    def validate_connector(self, connector: dict[str, Any]) -> None:
        """Refuse a connector with a missing or malformed field.

        Cinder calls it before ``create_export``/``initialize_connection``;
        the flow calls it before revoking anything.  Every tool-facing
        field present is checked against its grammar
        (:mod:`cinder_forcedetach.connector_grammar`).
        """
        connector_grammar.check(connector, self.required_connector_fields)

    def terminate_connection(self, volume: objects.Volume,
                             connector: Optional[dict[str, Any]],
                             **kwargs: Any) -> bool:
        """Cinder's teardown of one host: the flow, without the database.

        Returns True while another attachment still uses the export
        (Cinder then keeps it), as the manager's attachment delete expects.
        Without a connector it tears down every host; with several live
        attachments and no connector (``os-force_detach`` naming only an
        attachment) see
        :func:`cinder_forcedetach.flows.force_detach.revoke_after_detach`.
        An ``os-force_detach`` (:meth:`_forced_by_operator`) is counted
        and notified as a forced detach of reason ``operator``.
        """
        reason = (notifications.OPERATOR
                  if self._forced_by_operator(volume, connector) else None)
        if connector is None:
            live = [a for a in objects.VolumeAttachmentList.
                    get_all_by_volume_id(cinder_context.get_admin_context(),
                                         volume.id)
                    if fd_attachments.is_live(a)]
            if len(live) > 1:
                return force_detach_flow.revoke_after_detach(
                    self, volume, live,
                    self.configuration.safe_get(
                        'forcedetach_detach_wait_seconds'), reason=reason)
        return force_detach_flow.run(
            cinder_context.get_admin_context(), self, volume,
            connector=connector, reset_database=False, reason=reason)

    @staticmethod
    def _forced_by_operator(volume: objects.Volume,
                            connector: Optional[dict[str, Any]]) -> bool:
        """Whether Cinder's :meth:`terminate_connection` is a force-detach.

        Cinder tells the driver nothing of it (``force`` stays False): its
        API calls the volume manager's ``terminate_connection``, which
        calls ours.  That RPC call also serves the legacy detach (Nova's
        pre-attachment-API volumes) and Cinder's own host copies; an
        attachment delete comes through another method
        (``_connection_terminate``).  So it is an ``os-force_detach`` when
        the nearest caller of Cinder's manager is its
        ``terminate_connection``, called over RPC (not from its own host
        copy, ``_detach_volume``), on a volume in a force-detach status
        with no migration under way, and either with no connector (the
        legacy detach always gives one) or on a volume that is not
        ``detaching`` (the legacy detach calls ``os-begin_detaching``
        first; ``os-force_detach`` does not).  An ``os-force_detach``
        with a connector of a volume stuck in ``detaching`` is not told
        from a legacy detach, and is not counted.
        """
        frame = _manager_frame(sys._getframe(2), 8)
        if frame is None or frame.f_code.co_name != 'terminate_connection':
            return False
        caller = frame.f_back
        if caller is not None and caller.f_globals.get(
                '__name__') == _MANAGER:
            return False    # _detach_volume: Cinder's own host copy
        status = getattr(volume, 'status', None)
        migration = getattr(volume, 'migration_status', None)
        if status not in _FORCED_STATUSES or (
                migration and migration not in ('success', 'error')):
            return False
        return connector is None or status != 'detaching'

    def _create_export_locked(self, context: cinder_context.RequestContext,
                              volume: objects.Volume, *args: Any,
                              **kwargs: Any) -> Optional[dict[str, Any]]:
        """Cinder's export before a grant, under the volume's lock.

        An export is several backend calls (a tgt target: CHAP account,
        target, LUN, account binding); another service's
        ``remove_export`` in between would delete what this one is still
        binding.
        """
        with locks.held(volume.id):
            return self.create_export_unlocked(context, volume, *args,
                                               **kwargs)

    def _remove_export_locked(self, context: cinder_context.RequestContext,
                              volume: objects.Volume) -> None:
        force_detach_flow.run_remove_export(context, self, volume)

    def _initialize_connection_locked(self, volume: objects.Volume,
                                      connector: dict[str, Any]
                                      ) -> dict[str, Any]:
        """Cinder's grant of access to a host, under the volume's lock.

        A force-detach that ended every attachment while this attach was
        on its way (Cinder's API had found the attachment, the volume
        service had not granted yet) leaves the volume ``available`` with
        no attachment of this host: the grant is then refused, so no host
        gets access to a volume Cinder says is detached.  This volume
        host's own connections (image copy, backup, migration) and volumes
        in any other status are Cinder's to decide, and so is a call that
        names no host (a driver reading its own connection data).

        Before any host is granted, the holders the backend shows that no
        live attachment explains (a reset of the volume's state left them)
        are cut off: see :mod:`cinder_forcedetach.grant_fence`.

        Cinder's attachment update records the host's connector on the
        attachment only after the grant returns, without the lock: another
        host's grant fence in between would find this host's access
        explained by nothing and cut it (two hosts attaching a multiattach
        volume at once).  So the grant writes Cinder's record itself before
        the lock goes (:meth:`_record_grant`).

        The grant is handed back only if the lock service still confirms
        the lock after it: a lease that expired during the checks (this
        service cut off from the lock service, or paused) may have let
        another service grant another host, whose checks could not see
        this grant yet.  Then this grant is revoked and the call fails.
        """
        attachment_id = self._granted_attachment_id()
        with locks.held(volume.id) as lock:
            fresh = self._check_grant(volume, connector, attachment_id)
            if connector and fresh is not None:
                grant_fence.fence_before_grant(
                    self, cinder_context.get_admin_context(), fresh,
                    connector, fresh.volume_attachment)
            info = self.initialize_connection_unlocked(volume, connector)
            if connector and not locks.lock_is_ours(lock):
                self._undo_grant(volume, connector)
                raise fd_exception.LockLost(
                    volume_id=volume.id, step='handing the grant to host '
                    '%s (revoked)' % connector.get('host'),
                    reason='lease lost during the grant')
            if connector and attachment_id:
                self._record_grant(volume, connector, attachment_id)
        pending = self._grant_pending(fresh, connector) if fresh else []
        if pending:
            threading.Thread(target=self._confirm_grant, daemon=True,
                             args=(volume.id, connector, pending)).start()
        return info

    #: How long a grant waits for Cinder to record its host's connector on
    #: the attachment (Cinder does right after the grant returns).
    grant_confirm_seconds = 120.0
    grant_confirm_interval = 0.5

    def _grant_pending(self, fresh: objects.Volume,
                       connector: dict[str, Any]) -> list[str]:
        """The attachments this grant may be for, none recorded yet.

        Cinder's attachment update (API 3.27+) writes the host's connector
        on the attachment only after the grant returns.  An attachment
        delete that comes first skips the backend (no connector: nothing
        to terminate) and the update then fails on the deleted row: the
        grant would stay, explained by no attachment.  So a grant to a
        remote host made while a live attachment has no connector yet is
        confirmed afterwards (:meth:`_confirm_grant`); the host's own
        connections (image copy, backup) and the legacy attach (its
        attachment row comes later, with ``os-attach``) are left alone.
        """
        host = connector.get('host')
        if not host or host in self.local_host_names():
            return []
        live = [a for a in fresh.volume_attachment or ()
                if fd_attachments.is_live(a)]
        if any(fd_attachments.same_host(a.connector, connector)
               for a in live if a.connector):
            return []
        return [a.id for a in live if not a.connector]

    def _record_grant(self, volume: objects.Volume,
                      connector: dict[str, Any], attachment_id: str) -> None:
        """Write on the attachment what Cinder writes after the grant.

        The same values as Cinder's ``_connection_create`` (which writes
        them again): the attachment is ``attaching`` with the host's
        connector, so the next grant's fence, under the lock, finds the
        host explained, and an attachment delete from now on goes through
        the volume service (a ``reserved`` one skips the backend).  An
        attachment deleted meanwhile gets no grant: the host is revoked
        unless another live attachment may be its own.
        """
        context = cinder_context.get_admin_context()
        try:
            db_api.volume_attachment_update(
                context, attachment_id,
                {'attach_status': fields.VolumeAttachStatus.ATTACHING,
                 'connector': jsonutils.dumps(connector)})
        except exception.VolumeAttachmentNotFound:
            try:
                others = self._host_attachments(
                    objects.Volume.get_by_id(context, volume.id), connector)
            except exception.VolumeNotFound:
                others = []
            if not others:
                self._undo_grant(volume, connector)
            raise exception.InvalidVolume(reason=_(
                'volume %(vol)s: attachment %(att)s of host %(host)s was '
                'deleted during its grant: access not granted') % {
                    'vol': volume.id, 'att': attachment_id,
                    'host': connector.get('host')})

    @staticmethod
    def _host_attachments(volume: objects.Volume,
                          connector: dict[str, Any]
                          ) -> list[objects.VolumeAttachment]:
        """Live attachments that are, or may be, *connector*'s host's."""
        return [a for a in volume.volume_attachment or ()
                if fd_attachments.is_live(a) and (
                    not a.connector or
                    fd_attachments.same_host(a.connector, connector))]

    def _confirm_grant(self, volume_id: str, connector: dict[str, Any],
                       pending: list[str]) -> None:
        """Revoke a grant whose attachment Cinder deleted unfinished.

        Polls the *pending* attachments (deleted ones too) until one has
        the host's connector and an attach time (Cinder finished the
        update: the grant was that attachment's, whatever happened to it
        since), or each has ended without one or carries another host's
        connector: then, unless a live attachment may be the host's, the
        host is revoked under the volume's lock and an ``available`` volume
        loses its export.  An attachment API delete that read the attachment
        ``reserved`` skips the backend even when the grant recorded the
        connector meanwhile (:meth:`_record_grant`).  Anything else after
        :attr:`grant_confirm_seconds` is left to the reconciler.
        """
        context = cinder_context.get_admin_context()
        rows = context.elevated(read_deleted='yes')
        deadline = time.monotonic() + self.grant_confirm_seconds
        try:
            while time.monotonic() < deadline:
                waiting = False
                for att_id in pending:
                    try:
                        att = objects.VolumeAttachment.get_by_id(rows,
                                                                 att_id)
                    except exception.VolumeAttachmentNotFound:
                        continue
                    ours = not att.connector or fd_attachments.same_host(
                        att.connector, connector)
                    if ours and att.attach_time:
                        return      # Cinder finished the update
                    if ours and fd_attachments.row_is_live(att):
                        waiting = True
                if not waiting:
                    self._revoke_unrecorded_grant(context, volume_id,
                                                  connector)
                    return
                time.sleep(self.grant_confirm_interval)
            LOG.warning('Volume %(vol)s: host %(host)s was granted access '
                        'for an attachment Cinder has not recorded after '
                        '%(s)d s; the reconciler judges it.',
                        {'vol': volume_id, 'host': connector.get('host'),
                         's': self.grant_confirm_seconds})
        except Exception:
            LOG.exception('Volume %(vol)s: the grant to host %(host)s could '
                          'not be confirmed; the reconciler cuts it if no '
                          'live attachment explains it.',
                          {'vol': volume_id, 'host': connector.get('host')})

    def _revoke_unrecorded_grant(self, context: cinder_context.RequestContext,
                                 volume_id: str,
                                 connector: dict[str, Any]) -> None:
        with locks.held(volume_id):
            try:
                volume = objects.Volume.get_by_id(context, volume_id)
            except exception.VolumeNotFound:
                return
            if self._host_attachments(volume, connector):
                return      # attached again meanwhile
            LOG.warning('Volume %(vol)s: host %(host)s was granted access '
                        'for an attachment deleted before Cinder finished '
                        'it; revoking the host.',
                        {'vol': volume_id, 'host': connector.get('host')})
            self.revoke_host_access(volume, connector)
            if volume.status == 'available' and not any(
                    fd_attachments.is_live(a)
                    for a in volume.volume_attachment or ()):
                self.remove_export_unlocked(context, volume)

    def _undo_grant(self, volume: objects.Volume,
                    connector: dict[str, Any]) -> None:
        """Revoke a grant made after the volume's lock was lost.

        Without the lock: revoking can only take access away, never give
        it.  A failure is logged: the host may keep access until the
        reconciler or the next grant cuts it; it never got the connection.
        """
        try:
            self.revoke_host_access(volume, connector)
        except Exception:
            LOG.exception('Volume %(vol)s: could not revoke host %(host)s, '
                          'granted after the lock was lost; it may reach '
                          'the volume until the reconciler or the next '
                          'grant cuts it.',
                          {'vol': volume.id, 'host': connector.get('host')})

    def _ensure_export_locked(self, context: cinder_context.RequestContext,
                              volume: objects.Volume
                              ) -> Optional[dict[str, Any]]:
        """Cinder's re-export at start-up, under the volume's lock.

        Cinder read the volume before this service took the lock: another
        service's force-detach may have ended its attachments since.  The
        volume is read again, and re-exported only if it is still in-use
        (Cinder's own rule), to the hosts still attached.

        A re-export grants, so it is handed back only if the lock service
        still confirms the lock after it (see
        :meth:`_initialize_connection_locked`); otherwise another service
        may have torn the volume down meanwhile, and what this one exported
        is judged again under the lock taken anew (:meth:`_judge_again`)
        before the call fails.
        """
        with locks.held(volume.id) as lock:
            try:
                volume.refresh()
            except exception.VolumeNotFound:
                return None
            if volume.status != 'in-use':
                LOG.info('Volume %(vol)s is %(status)s now: not exported '
                         'again.', {'vol': volume.id,
                                    'status': volume.status})
                return None
            model = self.ensure_export_unlocked(context, volume)
            if locks.lock_is_ours(lock):
                return model
        self._judge_again(context, volume.id)
        raise fd_exception.LockLost(
            volume_id=volume.id, step='handing the re-export back (judged '
            'again)', reason='lease lost during the re-export')

    def _judge_again(self, context: cinder_context.RequestContext,
                     volume_id: str) -> None:
        """Judge again, under the lock taken anew, access given without it.

        The volume as read now: not in-use, the export goes (unless a live
        attachment uses it: the driver's ``remove_export``); in-use, every
        host on it that no live attachment explains is revoked.  Where the
        lock cannot be had now, nor could another service have had it to
        tear anything down; the reconciler judges the volume later.
        """
        try:
            with locks.held(volume_id):
                try:
                    volume = objects.Volume.get_by_id(context, volume_id)
                except exception.VolumeNotFound:
                    return
                LOG.warning('Volume %(vol)s got access granted after its '
                            'lock was lost; judged again now that it is '
                            '%(status)s.', {'vol': volume_id,
                                            'status': volume.status})
                if volume.status != 'in-use':
                    self.remove_export_unlocked(context, volume)
                    return
                holders = (self.volume_holders(volume) if self.audit_grants
                           else [])
                live = [a.connector for a in volume.volume_attachment or ()
                        if fd_attachments.is_live(a) and a.connector]
                for connector in grant_fence.unique_connectors(
                        grant_fence.unexplained(holders or [], live)):
                    self.revoke_host_access(volume, connector)
        except Exception:
            LOG.exception('Volume %s: access granted after its lock was lost '
                          'could not be judged again; the reconciler cuts '
                          'what no live attachment explains.', volume_id)

    def _check_grant(self, volume: objects.Volume,
                     connector: Optional[dict[str, Any]],
                     attachment_id: Optional[str] = None
                     ) -> Optional[objects.Volume]:
        """Refuse a host a force-detach ended; the volume as read now.

        None when no connector is given (a driver reading its own
        connection data) or Cinder has no such volume: no grant to check.
        *attachment_id* is the attachment being granted, where Cinder's
        manager says (:meth:`_granted_attachment_id`).
        """
        if not connector:
            return None
        try:
            fresh = objects.Volume.get_by_id(
                cinder_context.get_admin_context(), volume.id)
        except exception.VolumeNotFound:
            return None
        host = (connector or {}).get('host')
        if not host or host in self.local_host_names():
            return fresh    # no remote host named: not a grant to one
        if attachment_id and not self._attachment_live(attachment_id):
            LOG.warning('Volume %(vol)s: refusing access to host %(host)s: '
                        'its attachment %(att)s ended before the grant (a '
                        'force-detach or an attachment delete).',
                        {'vol': volume.id, 'host': host,
                         'att': attachment_id})
            raise exception.InvalidVolume(reason=_(
                'volume %(vol)s: attachment %(att)s of host %(host)s ended '
                'before its grant (a force-detach ended it): access not '
                'granted') % {'vol': volume.id, 'att': attachment_id,
                              'host': host})
        if fresh.status != 'available':
            return fresh
        if self._host_attachments(fresh, connector):
            return fresh
        LOG.warning('Volume %(vol)s: refusing access to host %(host)s: the '
                    'volume is available with no attachment of that host '
                    '(a force-detach ended it).',
                    {'vol': volume.id, 'host': (connector or {}).get('host')})
        raise exception.InvalidVolume(reason=_(
            'volume %(vol)s has no attachment of host %(host)s any more (a '
            'force-detach ended it): access not granted') % {
                'vol': volume.id, 'host': (connector or {}).get('host')})

    @staticmethod
    def _granted_attachment_id() -> Optional[str]:
        """The attachment Cinder's attachment update grants, if that calls.

        Cinder gives the driver no attachment: its manager's
        ``_connection_create`` holds it.  A force-detach or an attachment
        delete can end it after Cinder's API found it and before this
        grant, while another host's attachment keeps the volume ``in-use``
        (the status check alone then lets the grant through, and Cinder's
        update fails on the ended row after the ACL is made).  None for
        the legacy attach, whose attachment row comes after its grant.
        """
        frame = _manager_frame(sys._getframe(2), 10)
        if frame is None or frame.f_code.co_name != '_connection_create':
            return None
        return getattr(frame.f_locals.get('attachment'), 'id', None)

    @staticmethod
    def _attachment_live(attachment_id: str) -> bool:
        """Whether the attachment is still there and not ended."""
        context = cinder_context.get_admin_context().elevated(
            read_deleted='yes')
        try:
            attachment = objects.VolumeAttachment.get_by_id(context,
                                                            attachment_id)
        except exception.VolumeAttachmentNotFound:
            return False
        return fd_attachments.row_is_live(attachment)

    # -- hooks a driver implements ----------------------------------------

    def revoke_host_access(self, volume: objects.Volume,
                           connector: Optional[dict[str, Any]]) -> bool:
        """Remove the backend's access and sessions for a host.

        *connector* None means every host.  Returns True when other hosts
        keep access.  Must succeed when there is nothing left to revoke.
        """
        raise NotImplementedError()

    def fence_clients(self, volume: objects.Volume,
                      connectors: list[Optional[dict[str, Any]]],
                      keep_attachments: list[Any]) -> list[str]:
        """Cut off clients of the hosts in *connectors* that still hold it.

        None in *connectors* means every client that does not belong to
        one of *keep_attachments*.  Default: nothing to fence, because
        revoking access already disconnected the host (iSCSI, FC).
        Returns the fenced client addresses.
        """
        return []

    #: Access is granted per host (ACL entries, LUN masking), so the host
    #: of every live attachment must show up in :meth:`audit_holders`.
    #: False where access is a live client (RBD: a stopped guest holds
    #: nothing).
    audit_grants: bool = True

    def audit_holders(self) -> dict[str, list[host_access.Holder]]:
        """Who the backend lets reach each volume now, in one bulk read.

        ``{volume name: [cinder_forcedetach.audit.host_access.Holder]}`` for
        every volume the backend exports or that a client holds; a volume
        absent holds nothing.  The audit (``cinder-forcedetach audit``)
        compares it with Cinder's attachments and Nova's mappings.
        Default: the backend cannot tell (its volumes are not audited).
        """
        raise NotImplementedError()

    def volume_holders(self, volume: objects.Volume
                       ) -> Optional[list[host_access.Holder]]:
        """Who the backend lets reach *volume* now, or None if it cannot tell.

        ``[cinder_forcedetach.audit.host_access.Holder]``, read before every
        grant (:mod:`cinder_forcedetach.grant_fence`).  Default: this
        volume's entry of :meth:`audit_holders`; a driver overrides it
        with a read of the one volume.
        """
        try:
            return self.audit_holders().get(volume.name, [])
        except NotImplementedError:
            return None

    def local_connection_info(self, volume: objects.Volume,
                              connector: dict[str, Any]
                              ) -> Optional[dict[str, Any]]:
        """connection_info for this host when Cinder stored none."""
        return None

    def image_destination(self, volume: objects.Volume) -> str:
        """The volume as ``qemu-img convert`` names its output."""
        return self.local_path(volume)

    def open_volume_for_write(self, volume: objects.Volume) -> VolumeFile:
        """A writable binary file object on the volume."""
        return open(self.local_path(volume), 'r+b')

    # -- the local host ------------------------------------------------------

    @staticmethod
    def local_host_names() -> set[str]:
        """Names by which connectors may name this volume host."""
        names = {socket.gethostname(), CONF.host}
        return {n for n in names if n}

    def disconnect_local_host(self, volume: objects.Volume,
                              connector: Optional[dict[str, Any]],
                              attachments: Sequence[objects.VolumeAttachment]
                              ) -> None:
        """Disconnect this host's connections to *volume* with os-brick."""
        if not self.configuration.safe_get(
                'forcedetach_disconnect_local_host'):
            return
        pairs = [(connector or a.connector, a.connection_info)
                 for a in attachments]
        if connector and not attachments:
            pairs = [(connector, None)]
        local = self.local_host_names()
        for host_connector, info in pairs:
            if not host_connector or host_connector.get('host') not in local:
                continue
            info = info or self.local_connection_info(volume, host_connector)
            if not info:
                continue
            # Cinder stores an attachment's connection_info flattened:
            # the 'data' keys beside driver_volume_type.
            properties = info.get('data', info)
            brick = volume_utils.brick_get_connector(
                info['driver_volume_type'],
                use_multipath=bool(host_connector.get('multipath')),
                device_scan_attempts=self.configuration.safe_get(
                    'forcedetach_device_scan_attempts'))
            LOG.info('Disconnecting volume %s from this host (%s).',
                     volume.id, info['driver_volume_type'])
            brick.disconnect_volume(properties, None, force=True,
                                    ignore_errors=True)

    # -- reimage ---------------------------------------------------------

    def copy_image_to_volume(self, context: cinder_context.RequestContext,
                             volume: objects.Volume, image_service: Any,
                             image_id: str, disable_sparse: bool = False,
                             discard: Optional[Callable[[], bool]] = None
                             ) -> None:
        """Write the image onto the volume behind Cinder's image gates.

        A raw image is streamed (no temporary file) after the format
        inspector has passed its head; any other format goes through
        upstream's ``fetch_to_raw``; see :mod:`cinder_forcedetach.image_gates`.
        *discard*: see :func:`cinder_forcedetach.image_gates.fetch_to_volume`;
        by default the driver's ``discard_volume(volume)`` if it has one.
        """
        conf = self.configuration
        if discard is None and hasattr(self, 'discard_volume'):
            discard = lambda: self.discard_volume(volume)  # noqa: E731
        try:
            image_gates.copy_to_volume(
                context, image_service, image_id, volume.size,
                self.image_destination(volume),
                lambda: self.open_volume_for_write(volume),
                conf.safe_get('forcedetach_image_formats'),
                sparse=not disable_sparse, discard=discard,
                blocksize=conf.safe_get('volume_dd_blocksize') or '1M',
                execute=self._execute)
        except (exception.Invalid,
                exception.ImageConversionNotAllowed) as err:
            LOG.error('Image %(img)s refused for volume %(vol)s: %(err)s',
                      {'img': image_id, 'vol': volume.id, 'err': err})
            raise

    def reimage(self, context: cinder_context.RequestContext,
                volume: objects.Volume, image_service: Any,
                image_id: str) -> None:
        """Replace the volume's content by an image (server rebuild)."""
        if volume.status not in ('downloading', 'available', 'error',
                                 'reserved'):
            raise exception.InvalidVolume(
                reason=_('cannot reimage a volume in status %s') %
                volume.status)
        self.copy_image_to_volume(context, volume, image_service, image_id,
                                  disable_sparse=True)

    # -- connection_info refresh (nova-manage volume_attachment refresh) ----

    # What Cinder's volume manager adds to the driver's connection data
    # (_parse_connection_options, _connection_create): kept from the stored
    # connection_info unless the driver now returns them itself.
    MANAGER_CONNECTION_KEYS = ('qos_specs', 'access_mode', 'encrypted',
                               'cacheable', 'discard', 'enforce_multipath')

    def refresh_connection_info(self, context: cinder_context.RequestContext,
                                attachment: objects.VolumeAttachment
                                ) -> dict[str, Any]:
        """Rebuild an attachment's connection_info from the backend.

        Runs :meth:`initialize_connection` again with the connector stored
        on the attachment (so an RBD attachment gets the monitors' current
        addresses, an iSCSI one the current portal), stores the result on
        the attachment, flattened as Cinder stores it, and returns it.
        Under the volume's force-detach lock, so it never races one: the
        attachment is read again under it (a force-detach may have ended
        it since the caller read it), and a lease lost meanwhile fails the
        call after the volume's access is judged again
        (:meth:`_judge_again`).
        """
        volume = objects.Volume.get_by_id(context, attachment.volume_id)
        with locks.held(volume.id) as lock:
            try:
                attachment = objects.VolumeAttachment.get_by_id(
                    context, attachment.id)
            except exception.VolumeAttachmentNotFound:
                raise _nothing_to_refresh(attachment, 'deleted')
            if not attachment.connector or not fd_attachments.is_live(
                    attachment):
                raise _nothing_to_refresh(attachment,
                                          attachment.attach_status)
            self.validate_connector(attachment.connector)
            new = self.initialize_connection_unlocked(volume,
                                                      attachment.connector)
            confirmed = locks.lock_is_ours(lock)
            if confirmed:
                info = dict(new.get('data') or {})
                old = attachment.connection_info or {}
                for key in self.MANAGER_CONNECTION_KEYS:
                    if key not in info and key in old:
                        info[key] = old[key]
                info['driver_volume_type'] = new['driver_volume_type']
                info['attachment_id'] = attachment.id
                attachment.connection_info = info
                attachment.save()
        if not confirmed:
            self._judge_again(context, volume.id)
            raise fd_exception.LockLost(
                volume_id=volume.id, step='storing the refreshed connection '
                '(judged again)', reason='lease lost during the refresh')
        LOG.info('Refreshed connection_info of attachment %(att)s of volume '
                 '%(vol)s (%(type)s).', {'att': attachment.id,
                                         'vol': volume.id,
                                         'type': info['driver_volume_type']})
        return info


def _nothing_to_refresh(attachment: objects.VolumeAttachment,
                        status: str) -> exception.InvalidInput:
    return exception.InvalidInput(reason=_(
        'attachment %(att)s has no live connection to refresh (status '
        '%(status)s, connector %(conn)s)') % {
            'att': attachment.id, 'status': status,
            'conn': 'set' if attachment.connector else 'none'})
