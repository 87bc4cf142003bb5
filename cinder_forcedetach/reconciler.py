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

"""The reconciler: a leak no attach reaches is cut by the volume service.

Fence on grant (:mod:`cinder_forcedetach.grant_fence`) cuts what a
``reset-state`` left when the next host attaches.  A volume nobody attaches
again would keep the old host's access for good: so each volume service
runs, every ``forcedetach_reconcile_interval`` seconds, the audit
(:mod:`cinder_forcedetach.audit`) of its own backend, without Nova, and
acts on one case only:

* a ``leaked_export`` of a volume Cinder says is ``available`` with no live
  attachment is cut at once (our force-detach flow without the database,
  which checks again under the volume's lock that the volume is still
  available with no live attachment) when Cinder's rows show the reset:
  an attachment of that host ended while its access did not (every
  detach path of ours revokes a host before Cinder ends its attachment;
  ``os-reset_status`` ends the rows and nothing else);
* otherwise (no such trace) once the volume has stayed so for
  ``forcedetach_reconcile_grace_seconds``;
* every other finding is reported only (log, notification, counts), as
  ``cinder-forcedetach audit`` without ``--fix`` reports it.

In a cluster every service reconciles the backend; the flow's volume lock
serialises them and the second run finds nothing left.  Counts go to the
pool capabilities (``cinder get-pools --detail``) and each pass is
notified (``forcedetach.reconcile.pass``); each cut is a
``forcedetach.detach.forced`` with reason ``reconciler``.
"""

from __future__ import annotations

import collections
import datetime
from typing import Any, Iterable, Optional, TYPE_CHECKING

from cinder import context as cinder_context
from cinder.db import api as db_api
from cinder import exception
from cinder import objects
from cinder.volume import configuration
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_service import loopingcall
from oslo_utils import timeutils

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import scan
from cinder_forcedetach.audit import sources
from cinder_forcedetach.flows import force_detach as force_detach_flow
from cinder_forcedetach import host_access
from cinder_forcedetach import notifications

if TYPE_CHECKING:
    from cinder.db import models

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

reconcile_opts = [
    cfg.IntOpt('forcedetach_reconcile_interval',
               default=60, min=0,
               help='Seconds between two reconciler passes of this '
                    'backend: the audit of its volumes, cutting the '
                    'access a reset of the volume state left (0: off).'),
    cfg.IntOpt('forcedetach_reconcile_grace_seconds',
               default=120, min=0,
               help='An available volume with no live attachment that the '
                    'backend still lets a host reach, with no sign in '
                    'Cinder\'s rows that a reset left it, is cut once it '
                    'has stayed so this long.'),
    cfg.IntOpt('forcedetach_reconcile_limit',
               default=25, min=1,
               help='At most this many volumes are cut in one pass.'),
]

CONF.register_opts(reconcile_opts, group=configuration.SHARED_CONF_GROUP)

#: ``reason`` of the ``forcedetach.detach.forced`` notification.
REASON = notifications.RECONCILER
#: Capability keys (pool stats) the reconciler reports.
CAPABILITY_PREFIX = 'forcedetach_'


class Reconciler(object):
    """Passes of the audit over one driver's backend; see the module."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        conf = driver.configuration
        self.interval = conf.safe_get('forcedetach_reconcile_interval') or 0
        self.grace = conf.safe_get('forcedetach_reconcile_grace_seconds')
        self.limit = conf.safe_get('forcedetach_reconcile_limit')
        self.backend = driver.host
        #: [DEFAULT] cluster of the service (its cluster_name is
        #: ``cluster@backend``), or None.
        self.cluster = (getattr(driver, 'cluster_name', None) or
                        '').split('@', 1)[0] or None
        self.passes = 0
        self.cut_total = 0
        self.failed_total = 0
        self.last: dict[str, Any] = {}
        self._timer: Optional[loopingcall.FixedIntervalLoopingCall] = None

    def start(self) -> Reconciler:
        if not self.interval or not self.backend:
            LOG.info('Reconciler of %s is off.', self.backend)
            return self
        self._timer = loopingcall.FixedIntervalLoopingCall(self.run_once)
        self._timer.start(interval=self.interval,
                          initial_delay=self.interval,
                          stop_on_exception=False)
        LOG.info('Reconciler of %(backend)s every %(n)d s.',
                 {'backend': self.backend, 'n': self.interval})
        return self

    @property
    def running(self) -> bool:
        return self._timer is not None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    # -- one pass ----------------------------------------------------------

    def run_once(self) -> dict[str, Any]:
        """One pass; returns its counts (also kept for the capabilities)."""
        ctxt = cinder_context.get_admin_context()
        started = timeutils.utcnow()
        try:
            report = scan.run(
                ctxt, {self.backend: self.driver},
                CONF.volume_name_template,
                sources.backend_resolver(self.cluster, [self.backend]),
                grace=0)
            cut, waiting = self.select(ctxt, report.findings, started)
        except Exception as err:
            LOG.warning('Reconciler of %(backend)s could not read its '
                        'sources: %(err)s', {'backend': self.backend,
                                             'err': err})
            self.passes += 1
            self.last = {'at': started.isoformat(), 'findings': {},
                         'cut': 0, 'failed': 0, 'waiting': 0,
                         'unreachable': [str(err)]}
            return self.last
        for finding, why in cut:
            LOG.warning('Reconciler: volume %(vol)s is available with no '
                        'live attachment, but the backend still lets '
                        '%(holders)s reach it (%(why)s): cutting it off.',
                        {'vol': finding.volume_id,
                         'holders': finding.evidence, 'why': why})
        for finding, why in cut[:self.limit]:
            finding.result = self.cut(ctxt, finding, why)
        done = [(f, why) for f, why in cut if f.result == cases.REPAIRED]
        self.passes += 1
        self.cut_total += len(done)
        failed = [f for f, _why in cut
                  if (f.result or '').startswith('failed')]
        self.failed_total += len(failed)
        self.last = {
            'at': started.isoformat(),
            'seconds': round((timeutils.utcnow() - started).total_seconds(),
                             3),
            'findings': dict(collections.Counter(
                f.case for f in report.findings)),
            'cut': len(done), 'failed': len(failed),
            'waiting': len(waiting),
            'unreachable': list(report.unreachable)}
        if report.findings or report.unreachable:
            LOG.info('Reconciler of %(backend)s: %(last)s',
                     {'backend': self.backend, 'last': self.last})
        notifications.notify(ctxt, self.backend,
                             notifications.RECONCILE_PASS,
                             dict(self.last, backend=self.backend))
        return self.last

    def cut(self, ctxt: cinder_context.RequestContext,
            finding: cases.Finding, why: Optional[str] = None) -> str:
        """Tear down what reaches a volume found available and detached.

        The flow checks again, under the volume's lock, that the volume is
        still available with no live attachment (an attach may have begun
        since the read), and leaves Cinder's rows alone: they are right.
        Done, it is a forced detach of reason :data:`REASON` (counted and
        notified by the flow, with the finding's ``cut`` evidence and
        *why*).
        """
        try:
            volume = objects.Volume.get_by_id(ctxt, finding.volume_id)
            force_detach_flow.run(ctxt, self.driver, volume,
                                  reset_database=False,
                                  require_detached=True, reason=REASON,
                                  details={'cut': finding.evidence,
                                           'why': why})
        except exception.Invalid as err:
            LOG.info('Reconciler: %s', err)
            return 'changed: %s' % err
        except Exception as err:
            LOG.error('Reconciler: cutting what reaches volume %(vol)s '
                      'failed: %(err)s', {'vol': finding.volume_id,
                                          'err': err})
            return 'failed: %s' % err
        return cases.REPAIRED

    def select(self, ctxt: cinder_context.RequestContext,
               findings: Iterable[cases.Finding], now: datetime.datetime
               ) -> tuple[list[tuple[cases.Finding, str]],
                          list[cases.Finding]]:
        """``([(finding, why)] to cut now, [waiting for the grace])``."""
        cut: list[tuple[cases.Finding, str]] = []
        waiting: list[cases.Finding] = []
        for finding in findings:
            if (finding.case != 'leaked_export' or finding.refused or
                    finding.action != cases.DETACH_ALL):
                continue
            volume = objects.Volume.get_by_id(ctxt, finding.volume_id)
            if volume.status != 'available' or any(
                    fd_attachments.is_live(a)
                    for a in volume.volume_attachment):
                continue
            ended = _ended_attachment_of(ctxt, volume.id,
                                         finding.connector)
            if ended is not None:
                cut.append((finding, (
                    'attachment %s of that host ended at %s and its access '
                    'did not: a reset of the state' % (
                        ended['id'], ended['deleted_at'] or
                        ended['detach_time']))))
            elif _older_than(volume.updated_at, now, self.grace):
                cut.append((finding, 'available with no attachment since '
                                     '%s' % volume.updated_at))
            else:
                waiting.append(finding)
        return cut, waiting

    # -- reporting ---------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        """Counts for the pool capabilities."""
        last = self.last
        return {
            CAPABILITY_PREFIX + 'reconcile_passes': self.passes,
            CAPABILITY_PREFIX + 'reconcile_cut_total': self.cut_total,
            CAPABILITY_PREFIX + 'reconcile_failed_total': self.failed_total,
            CAPABILITY_PREFIX + 'reconcile_findings': sum(
                (last.get('findings') or {}).values()),
            CAPABILITY_PREFIX + 'reconcile_findings_by_case': dict(
                last.get('findings') or {}),
            CAPABILITY_PREFIX + 'reconcile_waiting': last.get('waiting', 0),
            CAPABILITY_PREFIX + 'reconcile_last': last.get('at'),
        }


def _older_than(stamp: Optional[datetime.datetime], now: datetime.datetime,
                seconds: float) -> bool:
    if stamp is None:
        return True
    # Cinder's objects give aware UTC stamps; timeutils.utcnow() is naive.
    stamp = stamp.replace(tzinfo=None)
    return stamp <= now.replace(tzinfo=None) - datetime.timedelta(
        seconds=seconds)


def _ended_attachment_of(ctxt: cinder_context.RequestContext,
                         volume_id: str, connector: Optional[dict[str, Any]]
                         ) -> Optional[models.VolumeAttachment]:
    """The latest ended attachment row of *connector*'s host, or None."""
    keys = host_access.connector_keys(connector)
    if not keys:
        return None
    rows = db_api.volume_attachment_get_all(
        ctxt.elevated(read_deleted='yes'), filters={'volume_id': volume_id})
    ended = [r for r in rows if r['attach_status'] in (
        fd_attachments.ENDED_ATTACH_STATUSES) and host_access.connector_keys(
        _loads(r['connector'])) & keys]
    return max(ended, key=lambda r: str(r['deleted_at'] or
                                        r['detach_time'] or ''),
               default=None)


def _loads(text: Optional[str]) -> Any:
    try:
        return jsonutils.loads(text) if text else None
    except ValueError:
        return None
