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

"""The cases an audit finds, and how one pass classifies every volume.

:func:`classify` is pure: it reads a :class:`Snapshot` of Cinder's rows,
each backend's holders and Nova's block device mappings, and returns
:class:`Finding` records, each naming its case and the repair
:mod:`.repair` would run.  Nothing here touches a source.

The cases and the force_detach spec's use cases (Cinder's
``specs/liberty/implement-force-detach-for-safe-cleanup``): see
:data:`CASES` and ``doc/audit.md``.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
from typing import (Any, Callable, Collection, Iterable, Optional, Sequence,
                    TypeGuard)

from cinder_forcedetach.audit import records
from cinder_forcedetach import host_access

Case = collections.namedtuple('Case', ['name', 'summary', 'usecase',
                                       'repair'])

CASES = collections.OrderedDict((c.name, c) for c in (
    Case('leaked_export',
         'the backend lets a host reach the volume, but Cinder has no live '
         'attachment of that host (or the volume is deleted)',
         'UseCase 5: DB available, backend exported and connected, Nova '
         'has no device',
         'revoke that host and fence its clients (our flow); the export '
         'goes when no attachment is left'),
    Case('attached_not_exported',
         'Cinder has a live attachment of a host the backend does not let '
         'in',
         'UseCase 1 and 3: DB attaching or detaching, backend never '
         'exported or already cleaned up',
         'force-detach the attachment (our flow); refused while Nova\'s '
         'instance is active on it (Nova reconnects it: hard reboot)'),
    Case('attachment_without_bdm',
         'a live attachment of an instance Nova has no block device '
         'mapping for (Nova forgot it)',
         'UseCase 1, 3 and 5: Nova has no device',
         'force-detach the attachment (our flow: backend teardown, then '
         'the attachment row)'),
    Case('bdm_without_attachment',
         'a Nova block device mapping whose attachment Cinder no longer has '
         '(Cinder forgot it)',
         'none (the spec assumes Cinder\'s rows outlive Nova\'s)',
         'none here: Nova deletes dangling mappings when the instance '
         'reboots (nova 2023.2)'),
    Case('reserved_orphan',
         'a reserved attachment (no connector) of a deleted instance, or of '
         'an instance that is not shelved-offloaded',
         'UseCase 1: DB attaching, backend never exported',
         'delete the attachment (our flow); refused while the instance is '
         'active on it'),
    Case('stuck_transition',
         'the volume has been attaching, detaching or reserved for longer '
         'than the grace period',
         'UseCase 1 to 4',
         'force-detach the volume (our flow); refused while an instance is '
         'active on one of its attachments'),
    Case('in_use_without_attachment',
         'Cinder says in-use (or attached) but no attachment is live '
         '(Cinder\'s own os-complete / attachment delete race)',
         'UseCase 3 with no attachment row left',
         'force-detach the volume (our flow): teardown, then available'),
    Case('interrupted_force_detach',
         'a force-detach stopped half-way (a crash): its record of the hosts '
         'it was revoking is still on the volume',
         'any: the teardown it began may have left the DB and the backend '
         'apart',
         'run the force-detach again for the recorded hosts (our flow), '
         'which finishes it and clears the record; refused while an '
         'instance is active on one of their attachments'),
    Case('stale_fence',
         'a fence (blocklist entry) force-detach set is still active but '
         'its volume is deleted',
         'none (fencing postdates the spec)',
         'lift the fence'),
    Case('forced_down_host',
         'a live attachment of a compute host Nova has forced down (the '
         'operator\'s step before evacuating its servers: "openstack '
         'compute service set --down HOST nova-compute")',
         'evacuation: the host is dead or partitioned, its guests may still '
         'write',
         'host fence: cut that host off the volume and end its attachments '
         '(our flow with its connector), so that the evacuated server can '
         'attach on its new host; not refused for an active instance: '
         'forced down is the operator saying the host is gone'),
))

# Repair actions (Finding.action): what repair.py runs.
REVOKE = 'revoke'            # flow with the holder's connector
DETACH = 'detach'            # flow with the attachment id
DETACH_ALL = 'detach-all'    # flow without connector nor attachment
TEARDOWN = 'teardown'        # flow without the DB (a deleted volume)
LIFT_FENCE = 'lift-fence'
RESUME = 'resume'            # flow for each recorded connector
NONE = 'none'                # not ours to repair

TRANSITIONS = ('attaching', 'detaching', 'reserved')
#: Seconds a volume or attachment must have been left alone before its
#: state counts as a finding: an operation may still be under way.
DEFAULT_GRACE = 600
#: The server listing's key for a server's volumes (Nova's API).
SERVER_VOLUMES = 'os-extended-volumes:volumes_attached'
# Nova instance states in which its volumes may be torn down.
INACTIVE_VM_STATES = ('shelved_offloaded', 'deleted', 'soft-delete')


@dataclasses.dataclass
class Finding(object):
    """One inconsistency, what shows it, and its repair."""

    case: str
    volume_id: str
    backend: Optional[str] = None
    attachment_id: Optional[str] = None
    instance_uuid: Optional[str] = None
    host: Optional[str] = None
    evidence: str = ''
    action: str = NONE
    connector: Optional[dict] = None
    #: RESUME: the recorded connectors (None: every host)
    connectors: Optional[list] = None
    addr: Optional[str] = None
    #: why --fix will not repair it (None: it may)
    refused: Optional[str] = None
    #: found, repaired, failed: ..., refused: ..., over the fix limit
    result: str = 'found'

    @property
    def repair(self) -> str:
        if self.action == NONE:
            return CASES[self.case].repair
        return {REVOKE: 'revoke host and fence',
                DETACH: 'force-detach attachment',
                DETACH_ALL: 'force-detach volume',
                TEARDOWN: 'teardown (volume deleted)',
                LIFT_FENCE: 'lift fence',
                RESUME: 'finish the force-detach'}[self.action]

    def row(self) -> dict[str, Any]:
        return {'case': self.case, 'volume': self.volume_id,
                'attachment': self.attachment_id,
                'instance': self.instance_uuid, 'host': self.host,
                'backend': self.backend, 'evidence': self.evidence,
                'repair': self.repair, 'result': self.result}


COLUMNS = ('case', 'volume', 'attachment', 'instance', 'host', 'backend',
           'evidence', 'repair', 'result')
#: Finding.result of a repair that ran and succeeded.
REPAIRED = 'repaired'
#: At most this many repairs per ``--fix`` run, unless told.
DEFAULT_FIX_LIMIT = 25


def fix_each(findings: Iterable[Finding],
             repair: Callable[[Finding], None],
             limit: int = DEFAULT_FIX_LIMIT,
             only: Optional[Collection[str]] = None) -> int:
    """Call *repair* on each finding ours to repair, in order.

    Sets each finding's ``result``.  A refused finding (an instance active
    on it, Nova not consulted, Nova's own to repair) is never passed to
    *repair*; neither is one of a case not in *only*, nor any after
    *limit* repairs.  An exception of *repair* is that finding's failure,
    not the run's: the next one is still tried.

    :returns: how many repairs ran (successful or not).
    """
    ran = 0
    for finding in findings:
        if only and finding.case not in only:
            finding.result = 'not selected'
        elif finding.refused or finding.action == NONE:
            finding.result = 'refused: %s' % (finding.refused or
                                              'not ours to repair')
        elif ran >= limit:
            finding.result = 'over the fix limit (%d)' % limit
        else:
            ran += 1
            try:
                repair(finding)
            except Exception as err:
                finding.result = 'failed: %s' % err
            else:
                finding.result = REPAIRED
    return ran


@dataclasses.dataclass
class Backend(object):
    """What one backend holds, read in one pass.

    :param holders: volume id -> holders (a volume absent holds nothing).
    :param grants: access is granted per host (tgt ACLs, FC masking), so
        an attached host must show up; False where access is a live client
        (RBD: a stopped guest holds nothing).
    :param error: why it could not be read (its volumes are not audited).
    """

    name: str
    holders: dict = dataclasses.field(default_factory=dict)
    grants: bool = True
    fences: list = dataclasses.field(default_factory=list)
    error: Optional[str] = None


@dataclasses.dataclass
class Nova(object):
    """Nova's volume block device mappings and instance states."""

    bdms: list = dataclasses.field(default_factory=list)
    #: instance uuid -> vm_state of every instance Nova listed
    instances: dict = dataclasses.field(default_factory=dict)
    #: compute hosts whose nova-compute service is forced down
    forced_down: frozenset = frozenset()

    def __post_init__(self) -> None:
        self.by_pair = {(b.instance_uuid, b.volume_id): b for b in self.bdms}
        self.by_volume: collections.defaultdict[
            str, list[records.Bdm]] = collections.defaultdict(list)
        for bdm in self.bdms:
            self.by_volume[bdm.volume_id].append(bdm)

    @classmethod
    def from_servers(cls, servers: Iterable[dict[str, Any]],
                     forced_down: Iterable[str] = ()) -> Nova:
        """Mappings from Nova's server listing (``GET /servers/detail``).

        It names each server's volumes, not attachment ids: mappings
        match Cinder's attachments by instance and volume.  *forced_down*:
        the hosts of the compute services Nova lists as forced down.
        """
        instances: dict[str, str] = {}
        bdms = []
        for server in servers:
            state = server.get('OS-EXT-STS:vm_state') or 'unknown'
            instances[server['id']] = state
            for vol in server.get(SERVER_VOLUMES) or []:
                bdms.append(records.Bdm(server['id'], vol['id'], None, state,
                                        server.get('OS-EXT-SRV-ATTR:host')))
        return cls(bdms, instances, frozenset(forced_down))

    def bdm_of(self, attachment: records.Attachment
               ) -> Optional[records.Bdm]:
        """The mapping of *attachment*'s instance and volume, if Nova has it.

        Nova's server listing names volumes, not attachment ids: a mapping
        without ``attachment_id`` matches by instance and volume.
        """
        bdm = self.by_pair.get((attachment.instance_uuid,
                                attachment.volume_id))
        if bdm is not None and bdm.attachment_id not in (None,
                                                         attachment.id):
            return None
        return bdm

    def bdm_has_attachment(self, bdm: records.Bdm,
                           attachments: Iterable[records.Attachment]
                           ) -> bool:
        return any(a.instance_uuid == bdm.instance_uuid and
                   bdm.attachment_id in (None, a.id) for a in attachments)


@dataclasses.dataclass
class Snapshot(object):
    """Every source, read once."""

    volumes: dict                       # id -> records.Volume
    attachments: dict                   # volume id -> [records.Attachment]
    backends: dict                      # host@backend -> Backend
    nova: Optional[Nova] = None         # None: Nova not consulted
    now: Optional[datetime.datetime] = None


def _active(bdm: Optional[records.Bdm]) -> TypeGuard[records.Bdm]:
    return bdm is not None and bdm.vm_state not in INACTIVE_VM_STATES


def recently_changed(volume: records.Volume,
                     attachments: Iterable[records.Attachment],
                     now: Optional[datetime.datetime], grace: float) -> bool:
    """Touched within the grace period: an operation may be under way."""
    if not grace or now is None:
        return False
    limit = now - datetime.timedelta(seconds=grace)
    stamps = [volume.updated_at] + [a.updated_at for a in attachments]
    return any(s is not None and s > limit for s in stamps)


def _describe(holders: Iterable[host_access.Holder]) -> str:
    return ', '.join('%s %s' % (h.kind, h.label) for h in holders)


class _VolumeAudit(object):
    """The findings of one volume."""

    def __init__(self, snapshot: Snapshot, volume: records.Volume,
                 backend: Backend) -> None:
        self.nova = snapshot.nova
        self.volume = volume
        self.backend = backend
        self.live = snapshot.attachments.get(volume.id, [])
        self.holders = backend.holders.get(volume.id, [])
        self.keys = {a.id: host_access.connector_keys(a.connector)
                     for a in self.live}
        self.findings: list[Finding] = []

    def add(self, case: str, **kwargs: Any) -> Finding:
        finding = Finding(case, self.volume.id, backend=self.backend.name,
                          **kwargs)
        self.findings.append(finding)
        return finding

    def refuse_if_nova_holds(self, finding: Finding,
                             attachments: Iterable[records.Attachment]
                             ) -> None:
        """Refuse a repair that ends an attachment an instance uses."""
        for att in attachments:
            if not att.instance_uuid:
                continue
            if self.nova is None:
                finding.refused = ('Nova was not consulted and attachment '
                                   '%s belongs to instance %s' % (
                                       att.id, att.instance_uuid))
                return
            bdm = self.nova.bdm_of(att)
            if _active(bdm):
                finding.refused = ('instance %s is %s on a live block '
                                   'device mapping of attachment %s' % (
                                       bdm.instance_uuid, bdm.vm_state,
                                       att.id))
                return

    def run(self) -> list[Finding]:
        vol = self.volume
        if vol.deleted:
            if self.holders:
                self.leaked(self.holders, deleted=True)
            return self.findings
        if vol.in_teardown is not None:
            return self.interrupted(vol.in_teardown)
        if not self.live and (vol.status == 'in-use' or
                              vol.attach_status == 'attached'):
            self.add('in_use_without_attachment', action=DETACH_ALL,
                     evidence='status %s, attach_status %s, no live '
                              'attachment' % (vol.status, vol.attach_status))
        elif vol.status in TRANSITIONS and not self.reservation():
            finding = self.add(
                'stuck_transition', action=DETACH_ALL,
                evidence='status %s since %s' % (vol.status, vol.updated_at))
            self.refuse_if_nova_holds(finding, self.live)
        for att in self.live:
            self.attachment(att)
        attached = [k for k in self.keys.values() if k]
        # A bare export (no ACL, no session) admits nobody: a leak only
        # when no attachment is left to use it.
        self.leaked([h for h in self.holders
                     if (h.keys or not self.live) and not any(
                         host_access.holder_reaches(h, k) for k in attached)])
        return self.findings

    def interrupted(self, connectors: Sequence[Optional[dict[str, Any]]]
                    ) -> list[Finding]:
        """One finding: finishing the force-detach repairs the rest."""
        everyone = any(c is None for c in connectors)
        leaving = [a for a in self.live if everyone or any(
            self.keys[a.id] & host_access.connector_keys(c)
            for c in connectors)]
        hosts = ', '.join(sorted((c or {}).get('host') or '*'
                                 for c in connectors))
        finding = self.add('interrupted_force_detach', host=hosts,
                           action=RESUME, connectors=list(connectors),
                           evidence='force-detach record for %s; status %s'
                                    % (hosts, self.volume.status))
        self.refuse_if_nova_holds(finding, leaving)
        return self.findings

    def reservation(self) -> bool:
        """Reserved, with a reserved attachment: the attachment's case.

        Normal for a shelved-offloaded instance.
        """
        return self.volume.status == 'reserved' and any(
            a.attach_status == 'reserved' for a in self.live)

    def attachment(self, att: records.Attachment) -> None:
        nova = self.nova
        bdm = nova.bdm_of(att) if nova else None
        if att.attach_status == 'reserved' and not att.connector:
            if nova is None or not att.instance_uuid:
                return
            state = nova.instances.get(att.instance_uuid)
            if state is None or state == 'deleted':
                self.add('reserved_orphan', attachment_id=att.id,
                         instance_uuid=att.instance_uuid, action=DETACH,
                         evidence='reserved; instance deleted')
            elif state != 'shelved_offloaded':
                finding = self.add(
                    'reserved_orphan', attachment_id=att.id,
                    instance_uuid=att.instance_uuid, action=DETACH,
                    evidence='reserved; instance %s' % state)
                self.refuse_if_nova_holds(finding, [att])
            return
        host = (att.connector or {}).get('host') or att.attached_host
        if nova is not None and att.connector and (
                att.attached_host in nova.forced_down):
            # Its other cases' repairs would refuse an active instance:
            # this one is for exactly that instance, evacuated.
            self.add('forced_down_host', attachment_id=att.id,
                     instance_uuid=att.instance_uuid, host=att.attached_host,
                     action=REVOKE, connector=att.connector,
                     evidence='Nova has nova-compute of %s forced down; '
                              'attachment %s' % (att.attached_host,
                                                 att.attach_status))
            return
        if nova is not None and att.instance_uuid and bdm is None:
            state = nova.instances.get(att.instance_uuid, 'deleted')
            self.add('attachment_without_bdm', attachment_id=att.id,
                     instance_uuid=att.instance_uuid, host=host,
                     action=DETACH,
                     evidence='instance %s has no mapping of it' % state)
            return
        if self.backend.grants and att.connector:
            keys = self.keys[att.id]
            if not any(host_access.holder_reaches(h, keys)
                       for h in self.holders):
                finding = self.add(
                    'attached_not_exported', attachment_id=att.id,
                    instance_uuid=att.instance_uuid, host=host,
                    action=DETACH,
                    evidence='%s, backend grants this host nothing' %
                             att.attach_status)
                self.refuse_if_nova_holds(finding, [att])

    def leaked(self, holders: Iterable[host_access.Holder],
               deleted: bool = False) -> None:
        """One finding per host the backend lets in without a reason."""
        by_host: collections.OrderedDict[
            frozenset[str], list[host_access.Holder]] = (
                collections.OrderedDict())
        for holder in holders:
            by_host.setdefault(holder.keys, []).append(holder)
        for keys, group in by_host.items():
            connector = next((h.connector for h in group if h.connector),
                             None)
            host = next(((connector or {})[k]
                         for k in ('host', 'ip', 'initiator')
                         if (connector or {}).get(k)), group[0].label)
            everyone = host_access.ANY_HOST in keys
            if deleted or not self.live:
                action = TEARDOWN if deleted else DETACH_ALL
            else:
                action = REVOKE
            finding = self.add('leaked_export', host=host, action=action,
                               connector=connector,
                               evidence=_describe(group))
            if action == REVOKE and (everyone or connector is None):
                finding.refused = ('the rule admits every host, attached '
                                   'ones too: narrow it by hand')
            elif self.nova is not None and not deleted:
                unmatched = [b for b in self.nova.by_volume.get(
                    self.volume.id, []) if _active(b) and
                    not self.nova.bdm_has_attachment(b, self.live)]
                if unmatched:
                    finding.refused = (
                        'instance %s is active with a mapping of this volume '
                        'that Cinder forgot: the holder may be its' %
                        unmatched[0].instance_uuid)


def classify(snapshot: Snapshot, grace: float = 0
             ) -> tuple[list[Finding], collections.Counter[str]]:
    """Every finding of *snapshot*, and the volumes not audited.

    Returns ``(findings, skipped)``: *skipped* maps a reason to a count
    (volume of a backend not read or unreachable, touched within *grace*
    seconds).
    """
    findings: list[Finding] = []
    skipped: collections.Counter[str] = collections.Counter()
    in_flux: set[str] = set()
    for volume in snapshot.volumes.values():
        backend = snapshot.backends.get(volume.backend)
        if backend is None:
            if not volume.deleted:
                skipped['backend %s not audited' % volume.backend] += 1
            continue
        if backend.error:
            skipped['backend %s unreachable' % backend.name] += 1
            continue
        live = snapshot.attachments.get(volume.id, [])
        if recently_changed(volume, live, snapshot.now, grace):
            skipped['changed within the grace period'] += 1
            in_flux.add(volume.id)
            continue
        findings += _VolumeAudit(snapshot, volume, backend).run()
    findings += _nova_findings(snapshot, in_flux)
    findings += _fence_findings(snapshot)
    findings += _unknown_findings(snapshot)
    return findings, skipped


def _nova_findings(snapshot: Snapshot,
                   in_flux: set[str]) -> list[Finding]:
    if snapshot.nova is None:
        return []
    nova, result = snapshot.nova, []
    for bdm in nova.bdms:
        if bdm.volume_id not in in_flux and not nova.bdm_has_attachment(
                bdm, snapshot.attachments.get(bdm.volume_id, [])):
            volume = snapshot.volumes.get(bdm.volume_id)
            result.append(Finding(
                'bdm_without_attachment', bdm.volume_id,
                backend=volume.backend if volume else None,
                attachment_id=bdm.attachment_id,
                instance_uuid=bdm.instance_uuid, host=bdm.host,
                evidence='instance %s; volume %s' % (
                    bdm.vm_state, 'deleted' if volume is None or
                    volume.deleted else volume.status),
                refused='Nova\'s to repair (reboot the instance)'))
    return result


def _fence_findings(snapshot: Snapshot) -> list[Finding]:
    result = []
    for backend in snapshot.backends.values():
        for fence in backend.fences:
            volume = snapshot.volumes.get(fence.volume_id)
            if fence.active and (volume is None or volume.deleted):
                result.append(Finding(
                    'stale_fence', fence.volume_id, backend=backend.name,
                    evidence='blocklist entry %s' % fence.addr,
                    addr=fence.addr, action=LIFT_FENCE))
    return result


def _unknown_findings(snapshot: Snapshot) -> list[Finding]:
    """Holders of a name no Cinder volume, live or deleted, has."""
    result = []
    for backend in snapshot.backends.values():
        for key, holders in backend.holders.items():
            if key.startswith('name:'):
                result.append(Finding(
                    'leaked_export', key, backend=backend.name,
                    evidence=_describe(holders),
                    refused='no Cinder volume has this name: remove it '
                            'by hand'))
    return result
