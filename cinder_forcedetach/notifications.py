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

"""The notifications this package sends, through Cinder's notifier.

Payloads carry ids, host names, initiator names and client addresses:
never connection_info, CHAP credentials or keys.

Every forced detach goes through :func:`detach_forced`, which counts it
(per backend and ``reason``, since the process started) and notifies it:
the counts the volume service reports in its pool capabilities
(:func:`forced_counts`) and the notifications cannot disagree.  A process
without messaging (the CLI) counts and sends nothing anyone reads.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Optional

from cinder import rpc
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: A host's access was cut outside Cinder's own orderly detach; ``reason``
#: says who cut it: one of :data:`REASONS`.
DETACH_FORCED = 'forcedetach.detach.forced'
#: ``reason`` of a force-detach an operator asked for: Cinder's
#: ``os-force_detach`` (``cinder force-detach``, ``cinder-forcedetach
#: volume force-detach``, ``openstack volume force detach``) or the
#: driver's ``force_detach``.
OPERATOR = 'operator'
#: ... of the reconciler's cut (:mod:`cinder_forcedetach.reconciler`).
RECONCILER = 'reconciler'
#: ... of the fence on grant (:mod:`cinder_forcedetach.grant_fence`).
GRANT = 'grant'
#: ... of a host fence (one host cut from many volumes at once).
HOST = 'host'
#: ... of an ``audit --fix`` repair.
AUDIT = 'audit'
#: Every reason, in the order the capabilities list them.
REASONS = (OPERATOR, RECONCILER, GRANT, HOST, AUDIT)
#: One reconciler pass, with its counts.
RECONCILE_PASS = 'forcedetach.reconcile.pass'
#: One finding of ``cinder-forcedetach audit`` (its row: case, volume,
#: attachment, instance, host, backend, evidence, repair, result).
AUDIT_FINDING = 'forcedetach.audit.finding'
#: One ``cinder-forcedetach audit`` run, with its counts by case.
AUDIT_PASS = 'forcedetach.audit.pass'
#: How often a command retries a broker that does not answer: a
#: notification never holds an operator's command for long.
CLI_RETRY = 2


def notify(context: Any, host: Optional[str], event: str,
           payload: dict[str, Any], priority: str = 'info') -> None:
    """Send *event*; a process without messaging (the CLI) sends nothing.

    A failure to notify is logged, never raised: what it reports is done.
    """
    if not rpc.initialized():
        return
    try:
        notifier = rpc.get_notifier('volume', host)
        getattr(notifier, priority)(context, event, payload)
    except Exception:
        LOG.warning('Could not notify %s.', event, exc_info=True)


def init_command(conf: Any) -> None:
    """Messaging for a command (the audit), as cinder.conf configures it.

    Cinder's own set-up (:func:`cinder.rpc.init`): with no notification
    driver in ``[oslo_messaging_notifications]`` nothing is sent.  A broker
    that does not answer costs :data:`CLI_RETRY` retries, then the
    notification is logged as lost.
    """
    if rpc.initialized():
        return
    from oslo_messaging import opts as messaging_opts

    try:
        for group, opts in messaging_opts.list_opts():
            if group == 'oslo_messaging_notifications':
                conf.register_opts(opts, group=group)
        conf.set_override('retry', CLI_RETRY,
                          group='oslo_messaging_notifications')
        rpc.init(conf)
    except Exception:
        LOG.warning('No notifications: messaging could not be set up.',
                    exc_info=True)


def end_command() -> None:
    """Close what :func:`init_command` opened."""
    if rpc.initialized():
        rpc.cleanup()


_LOCK = threading.Lock()
#: ``{(backend host, reason): forced detaches}`` since the process started.
_FORCED: collections.Counter[tuple[Optional[str], str]] = (
    collections.Counter())


def detach_forced(context: Any, host: Optional[str], reason: str,
                  payload: dict[str, Any]) -> dict[str, Any]:
    """Count one forced detach of backend *host* and notify it.

    The notification (:data:`DETACH_FORCED`, priority ``info``) carries
    *payload* with ``reason``.  *payload* must hold ids, host names,
    initiator names and client addresses only (see the module).

    :returns: the payload sent.
    """
    with _LOCK:
        _FORCED[(host, reason)] += 1
    payload = dict(payload, reason=reason)
    notify(context, host, DETACH_FORCED, payload)
    return payload


def forced_counts(host: Optional[str] = None) -> dict[str, int]:
    """``{reason: forced detaches}`` of backend *host* (None: all).

    Every reason of :data:`REASONS` is listed, 0 included.
    """
    counts = dict.fromkeys(REASONS, 0)
    with _LOCK:
        for (backend, reason), n in _FORCED.items():
            if host is None or backend == host:
                counts[reason] = counts.get(reason, 0) + n
    return counts


def reset_counts() -> None:
    """Forget the counts (tests)."""
    with _LOCK:
        _FORCED.clear()
