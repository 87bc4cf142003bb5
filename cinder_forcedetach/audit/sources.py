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

"""Reading each source of truth in bulk.

* Cinder: two queries on its database (volumes, live attachments) and one
  for the force-detach records, through Cinder's own engine and models;
  deleted volumes only when a backend or a fence still names them.
* Backends: one :meth:`audit_holders` call per driver (tgt: one
  ``tgtadm show``; FC: one read of the masking; RBD: the pool's images and
  the blocklist on one connection) and, where it fences, its records.
* Nova: its API with Cinder's ``[nova]`` service credentials: the server
  listing (paged, every project) names each server's volumes and state,
  with no call per server; or a JSON file (:func:`read_nova_file`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Optional, TYPE_CHECKING

from oslo_log import log as logging

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import records
from cinder_forcedetach import host_access

if TYPE_CHECKING:
    from cinder import context as cinder_context
    import sqlalchemy as sa

    #: ``f(volume host, cluster_name)`` -> ``host@backend`` serving it.
    BackendOf = Callable[[Optional[str], Optional[str]], Optional[str]]

LOG = logging.getLogger(__name__)

CHUNK = 500


class Unreachable(Exception):
    """A source could not be read (exit code 5)."""


def _name_pattern(template: str) -> re.Pattern[str]:
    head, _sep, tail = template.partition('%s')
    return re.compile('^%s(.+)%s$' % (re.escape(head), re.escape(tail)))


def _connector(text: Optional[str]) -> Optional[dict[str, Any]]:
    if not text:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return host_access.public_connector(value)


def backend_resolver(cluster: Optional[str],
                     audited: Iterable[str]) -> BackendOf:
    """``f(volume host, cluster_name)`` -> ``host@backend`` serving it.

    *audited*: the ``host@backend`` names being audited.  In a cluster
    (cinder.conf ``[DEFAULT] cluster``), a volume of any member of the
    cluster's backend is served by ours of the same backend name.
    """
    from cinder.volume import volume_utils

    ours = {b.split('@', 1)[1]: b for b in audited if '@' in b}

    def backend_of(host: Optional[str],
                   cluster_name: Optional[str] = None) -> Optional[str]:
        if not host:
            return None
        if cluster and cluster_name and '@' in cluster_name:
            member, name = volume_utils.extract_host(
                cluster_name, 'backend').split('@', 1)
            if member == cluster and name in ours:
                return ours[name]
        return volume_utils.extract_host(host, 'backend')
    return backend_of


class CinderDB(object):
    """Cinder's rows, through Cinder's engine (``[database] connection``)."""

    def __init__(self, context: cinder_context.RequestContext,
                 name_template: str, backend_of: BackendOf) -> None:
        self.context = context
        self.name_pattern = _name_pattern(name_template)
        self.name_template = name_template
        self._backend_of = backend_of
        self._backends: dict[tuple[Optional[str], Optional[str]],
                             Optional[str]] = {}

    def backend_of(self, host: Optional[str],
                   cluster_name: Optional[str]) -> Optional[str]:
        """The audited backend of a row (one answer per host and cluster)."""
        key = (host, cluster_name)
        if key not in self._backends:
            self._backends[key] = self._backend_of(host, cluster_name)
        return self._backends[key]

    def _session(self) -> Any:
        from cinder.db import api as db_api
        return db_api.main_context_manager.reader.using(self.context)

    def read(self) -> tuple[dict[str, records.Volume],
                            dict[str, list[records.Attachment]]]:
        """Live volumes by id, and live attachments by volume id."""
        import sqlalchemy as sa

        from cinder.db import models

        vt = models.Volume.__table__
        at = models.VolumeAttachment.__table__
        mt = models.VolumeAdminMetadata.__table__
        try:
            with self._session() as session:
                marked = dict(session.execute(sa.select(
                    mt.c.volume_id, mt.c.value).where(
                    mt.c.deleted.is_(False),
                    mt.c.key == fd_attachments.TEARDOWN_MARK)).all())
                volumes = {}
                for row in session.execute(self._volume_query(vt).where(
                        vt.c.deleted.is_(False))).all():
                    volumes[row.id] = self._volume(row, marked)
                attachments: dict[str, list[records.Attachment]] = {}
                ended = fd_attachments.ENDED_ATTACH_STATUSES
                for (aid, vid, status, instance, connector, host,
                     updated) in session.execute(sa.select(
                        at.c.id, at.c.volume_id, at.c.attach_status,
                        at.c.instance_uuid, at.c.connector,
                        at.c.attached_host, at.c.updated_at).where(
                        at.c.deleted.is_(False),
                        at.c.attach_status.notin_(ended))).all():
                    attachments.setdefault(vid, []).append(
                        records.Attachment(aid, vid, status, instance,
                                           _connector(connector), host,
                                           updated))
        except Exception as err:
            raise Unreachable('Cinder\'s database: %s' % err) from err
        for vid, text in marked.items():
            if vid in volumes:
                volumes[vid] = volumes[vid]._replace(
                    in_teardown=fd_attachments.parse_teardown(
                        text, attachments.get(vid, ())))
        return volumes, attachments

    @staticmethod
    def _volume_query(vt: sa.Table) -> sa.Select[Any]:
        import sqlalchemy as sa
        return sa.select(vt.c.id, vt.c._name_id, vt.c.status,
                         vt.c.attach_status, vt.c.host, vt.c.cluster_name,
                         vt.c.updated_at,
                         vt.c.deleted)

    def _volume(self, row: Any,
                marked: Optional[dict[str, str]] = None) -> records.Volume:
        (vid, name_id, status, attach_status, host, cluster, updated,
         deleted) = row
        record = marked.get(vid) if marked else None
        return records.Volume(
            vid, self.name_template % (name_id or vid), status,
            attach_status, self.backend_of(host, cluster), updated,
            bool(deleted),
            None if record is None else fd_attachments.parse_teardown(
                record, ()))

    def deleted(self, ids: Iterable[str]) -> dict[str, records.Volume]:
        """Deleted volumes among *ids* (their name ids too), by id."""
        from cinder.db import models

        vt = models.Volume.__table__
        ids = sorted(set(ids))
        found: dict[str, records.Volume] = {}
        try:
            with self._session() as session:
                for i in range(0, len(ids), CHUNK):
                    chunk = ids[i:i + CHUNK]
                    for row in session.execute(self._volume_query(vt).where(
                            vt.c.deleted.is_(True),
                            vt.c.id.in_(chunk) | vt.c._name_id.in_(chunk))):
                        found.setdefault(row.id, self._volume(row))
        except Exception as err:
            raise Unreachable('Cinder\'s database: %s' % err) from err
        return found

    def volume_id_of(self, name: str) -> Optional[str]:
        match = self.name_pattern.match(name)
        return match.group(1) if match else None


def read_backend(name: str, driver: Any) -> cases.Backend:
    """A :class:`cases.Backend` from *driver*, or one naming its error."""
    backend = cases.Backend(name, grants=getattr(driver, 'audit_grants',
                                                 True))
    try:
        backend.holders = driver.audit_holders()
    except NotImplementedError:
        backend.error = ('driver %s cannot list what it exports '
                         '(audit_holders)' % type(driver).__name__)
        return backend
    except Exception as err:
        backend.error = '%s: %s' % (type(err).__name__, err)
        return backend
    if hasattr(driver, 'list_fences'):
        try:
            backend.fences = [records.Fence(f['addr'], f['volume_id'],
                                            bool(f.get('active')))
                              for f in driver.list_fences()]
        except Exception as err:
            backend.error = 'fence records: %s: %s' % (
                type(err).__name__, err)
    return backend


def attach_holders(backend: cases.Backend, cinder: CinderDB,
                   volumes: dict[str, records.Volume]) -> None:
    """Key *backend*'s holders by volume id; add deleted volumes they name.

    Holders of a name that matches no volume, live or deleted, are kept
    under ``name:<name>`` and reported by the audit as unknown.
    """
    by_name = {v.name: v.id for v in volumes.values()}
    keyed: dict[str, list[host_access.Holder]] = {}
    missing: dict[str, list[host_access.Holder]] = {}
    for name, holders in backend.holders.items():
        if name in by_name:
            keyed[by_name[name]] = holders
        else:
            missing[name] = holders
    fenced = {f.volume_id for f in backend.fences
              if f.volume_id not in volumes}
    ids = {cinder.volume_id_of(n) for n in missing} | fenced
    deleted = cinder.deleted([i for i in ids if i]) if ids else {}
    deleted_by_name = {v.name: v for v in deleted.values()}
    unknown = 0
    for name, holders in missing.items():
        volume = deleted_by_name.get(name)
        if volume is None:
            unknown += 1
            keyed['name:%s' % name] = holders
            continue
        volumes[volume.id] = volume._replace(backend=backend.name)
        keyed[volume.id] = holders
    for volume in deleted.values():
        volumes.setdefault(volume.id, volume._replace(backend=backend.name))
    if unknown:
        LOG.warning('Backend %(backend)s holds %(n)d volume(s) no Cinder '
                    'volume names (listed as name:<name>).',
                    {'backend': backend.name, 'n': unknown})
    backend.holders = keyed


NOVA_API_VERSION = '2.89'


def read_nova_api(context: cinder_context.RequestContext,
                  timeout: float = 60) -> cases.Nova:
    """Nova's mappings from its server listing (every project, paged).

    Cinder's ``[nova]`` options give the endpoint and the service
    credentials (see :meth:`.cases.Nova.from_servers`).
    """
    from cinder.compute import nova as cinder_nova

    try:
        client = cinder_nova.novaclient(context, privileged_user=True,
                                        timeout=timeout,
                                        api_version=NOVA_API_VERSION)
        servers = client.servers.list(detailed=True,
                                      search_opts={'all_tenants': True},
                                      limit=-1)
        forced_down = [service.host for service in
                       client.services.list(binary='nova-compute')
                       if getattr(service, 'forced_down', False)]
    except Exception as err:
        raise Unreachable('Nova: %s' % err) from err
    return cases.Nova.from_servers((server.to_dict() for server in servers),
                                   forced_down)


def read_nova_file(path: str) -> cases.Nova:
    """Nova's mappings from a JSON file.

    ``{"instances": {uuid: vm_state}, "bdms": [{"instance_uuid",
    "volume_id", "attachment_id", "vm_state", "host"}],
    "forced_down_hosts": [host]}``, e.g. exported from Nova's cell
    database (``block_device_mapping`` joined with ``instances``, deleted
    = 0, destination_type = 'volume'; ``services`` with forced_down = 1
    and binary 'nova-compute').
    """
    try:
        with open(path) as f:
            data = json.load(f)
        bdms = [records.Bdm(b['instance_uuid'], b['volume_id'],
                            b.get('attachment_id'), b['vm_state'],
                            b.get('host')) for b in data.get('bdms', [])]
        instances = dict(data.get('instances', {}))
        forced_down = frozenset(data.get('forced_down_hosts', []))
        if not all(isinstance(h, str) for h in forced_down):
            raise TypeError('forced_down_hosts must be a list of host names')
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError('cannot read Nova mappings from %s: %s' % (
            path, err))
    for bdm in bdms:
        instances.setdefault(bdm.instance_uuid, bdm.vm_state)
    return cases.Nova(bdms, instances, forced_down)
