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

"""Who can reach a volume, in the terms every backend and the audit share.

A backend describes who can reach a volume with :class:`Holder` records
(``ForceDetachMixin.audit_holders``, ``volume_holders``).  A holder and an
attachment's connector are matched through *host keys*
(:func:`connector_keys`): the same strings for the same host whatever the
protocol, e.g. ``iqn:iqn.1994-05.com.redhat:h1``, ``wwpn:21000024ff000001``
or ``ip:10.0.0.5``.  Records carry no secrets.
"""

import collections
import functools
import ipaddress
import re
from typing import Any, Optional

#: Any host may reach the volume (e.g. a tgt ``initiator-address ALL``).
ANY_HOST = 'any'

Holder = collections.namedtuple('Holder', ['kind', 'keys', 'label',
                                           'connector'])
Holder.__doc__ = """Someone the backend lets reach a volume now.

:kind: ``acl``, ``address-acl``, ``session`` (iSCSI), ``mapping`` (FC LUN
    masking), ``watcher``, ``lock owner``, ``locker`` (RBD clients)...
:keys: frozenset of host keys (:func:`connector_keys`; :data:`ANY_HOST`).
:label: what the operator sees (an initiator, a client address, an array
    host); never a secret.
:connector: a connector the driver's ``revoke_host_access`` and
    ``fence_clients`` take to cut this holder off.
"""

_IP_CHARS = frozenset('0123456789abcdefABCDEF.:[]%')


@functools.lru_cache(maxsize=65536)
def _ip(value: Any) -> Optional[str]:
    """*value* as a canonical IP literal, or None (cached: hosts repeat)."""
    text = str(value)
    if not text or not _IP_CHARS.issuperset(text[:40]):
        return None             # a host name: not worth a failed parse
    try:
        return str(ipaddress.ip_address(text.strip('[]')))
    except ValueError:
        return None


def normalize_wwpn(value: Any) -> Optional[str]:
    """``21:00:00:24:FF:00:00:01`` -> ``21000024ff000001`` (or None)."""
    text = str(value).replace(':', '').lower()
    return text if re.fullmatch(r'[0-9a-f]{16}', text) else None


def connector_keys(connector: Any) -> frozenset[str]:
    """The host keys of a connector: its initiator, WWPNs and IPs.

    Only literals: the audit reads thousands of connectors and resolves no
    names (a client on a multi-homed host is matched by the connector's
    ``ip``).
    """
    keys: set[str] = set()
    if not isinstance(connector, dict):
        return frozenset()
    if isinstance(connector.get('initiator'), str):
        keys.add('iqn:' + connector['initiator'])
    wwpns = connector.get('wwpns')
    if isinstance(wwpns, (list, tuple)):
        keys.update('wwpn:' + w for w in map(normalize_wwpn, wwpns) if w)
    for field in ('ip', 'host'):
        value = connector.get(field)
        ip = _ip(value) if isinstance(value, str) and value else None
        if ip:
            keys.add('ip:' + ip)
    return frozenset(keys)


def holder_reaches(holder: Holder, connector_keys_: frozenset[str]
                   ) -> bool:
    """Whether *holder* belongs to the host of *connector_keys_*."""
    return ANY_HOST in holder.keys or bool(holder.keys & connector_keys_)


_PUBLIC_FIELDS = ('host', 'ip', 'initiator', 'wwpns', 'wwnns', 'nqn',
                  'platform', 'os_type', 'multipath')


def public_connector(connector: Any) -> Optional[dict[str, Any]]:
    """A connector without what may be secret, for records and plans."""
    if not isinstance(connector, dict):
        return None
    return {k: connector[k] for k in _PUBLIC_FIELDS if k in connector}
