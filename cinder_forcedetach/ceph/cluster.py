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

"""A librados connection for one operation, in bounded time."""

import collections
import contextlib
import json
from typing import Any, Iterator

from cinder import exception
from cinder.i18n import _

try:
    import rados
    import rbd
except ImportError:  # pragma: no cover - depends on the host
    rados = None
    rbd = None


class CephUnavailable(exception.VolumeBackendAPIException):
    message = _('Ceph cluster unavailable: %(reason)s')


#: How to reach a cluster: cluster name, configuration file, user, keyring
#: file (None: what the configuration names) and the seconds librados may
#: wait for monitors and OSDs in each call.
Access = collections.namedtuple('Access', 'name conf user keyring timeout')


@contextlib.contextmanager
def connect(access: Access, pool: str) -> Iterator[tuple[Any, Any]]:
    """``(client, ioctx)`` of a fresh connection to *pool*.

    A fresh connection reads the Ceph configuration again, so it follows
    monitors that moved; every librados wait is bounded by
    ``access.timeout``.  librados and librbd errors raised inside are
    turned into Cinder exceptions.
    """
    if rados is None or rbd is None:
        raise CephUnavailable(reason=_('the rados and rbd Python modules '
                                       'are not installed'))
    try:
        client = rados.Rados(rados_id=access.user, clustername=access.name,
                             conffile=access.conf)
    except rados.Error as err:
        raise CephUnavailable(reason=_('cannot read the Ceph '
                                       'configuration: %s') % err)
    try:
        timeout = str(access.timeout)
        for key in ('client_mount_timeout', 'rados_mon_op_timeout',
                    'rados_osd_op_timeout'):
            client.conf_set(key, timeout)
        if access.keyring:
            client.conf_set('keyring', access.keyring)
        client.connect()
        ioctx = client.open_ioctx(pool)
    except rados.Error as err:
        client.shutdown()
        raise CephUnavailable(reason=_('cannot connect to the cluster or '
                                       'open pool %(pool)s: %(err)s') %
                              {'pool': pool, 'err': err})
    try:
        yield client, ioctx
    except (rados.Error, rbd.Error) as err:
        raise exception.VolumeBackendAPIException(
            data=_('Ceph operation failed: %s') % err)
    finally:
        ioctx.close()
        client.shutdown()


def parse_json_prefix(text: str | bytes) -> Any:
    """The first JSON document of *text*.

    ``osd blocklist ls`` on Pacific prints the address list followed by
    the (empty) range list: ``[...][]``.
    """
    text = (text or b'').decode() if isinstance(text, bytes) else text
    text = text.strip()
    if not text:
        return []
    value, _end = json.JSONDecoder().raw_decode(text)
    return value


def mon_json(client: Any, command: dict[str, Any]) -> Any:
    """Run a mon command returning JSON; raise on failure."""
    command = dict(command, format='json')
    ret, out, err = client.mon_command(json.dumps(command), b'')
    if ret:
        raise exception.VolumeBackendAPIException(
            data=_('ceph %(cmd)s failed (%(ret)d): %(err)s') % {
                'cmd': command['prefix'], 'ret': ret, 'err': err})
    return parse_json_prefix(out)
