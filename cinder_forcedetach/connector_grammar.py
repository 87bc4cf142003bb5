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

"""The grammar of the connector fields that reach a tool.

A connector is whatever the client put in the request body.  Its
``initiator`` becomes a ``tgtadm`` argument (tgtd scans a bind request for
``initiator-address=``, so ``iqn...:a,initiator-address=ALL`` would bind an
address ACL ``ALL``), its ``wwpns``/``wwnns`` reach the array and the zone
manager, ``host`` and ``ip`` decide which clients are fenced.  Every such
field is checked here before anything is exported, granted or revoked; the
check fails closed with ``InvalidConnectorException`` naming the field.
"""

import ipaddress
import re
from typing import Any, Iterable, NoReturn, TypeGuard

from cinder import exception

ISCSI_NAME_MAX_BYTES = 223              # RFC 3720 3.2.6.1
HOST_NAME_MAX = 255

# RFC 3720 3.2.6.3.1: iqn.YYYY-MM.reversed.domain[:unique string].  The
# characters are those RFC 3722's stringprep leaves in an ASCII name
# (letters, digits, '-', '.', ':'), with '_' tolerated after the colon,
# where some initiators put host names.  No whitespace, ',' or '='.
_LABEL = r'[a-z0-9](?:[a-z0-9-]*[a-z0-9])?'
_IQN_RE = re.compile(
    r'iqn\.[0-9]{4}-(?:0[1-9]|1[0-2])\.%(l)s(?:\.%(l)s)*(?::[a-z0-9.:_-]*)?'
    % {'l': _LABEL}, re.IGNORECASE)
# RFC 3720 3.2.6.3.2 (EUI-64) and RFC 3980 (NAA 64- or 128-bit).
_EUI_RE = re.compile(r'eui\.[0-9a-f]{16}', re.IGNORECASE)
_NAA_RE = re.compile(r'naa\.(?:[0-9a-f]{16}|[0-9a-f]{32})', re.IGNORECASE)
# A WWN: 16 hex digits, bare or as colon-separated pairs.
_WWN_RE = re.compile(r'[0-9a-f]{16}|(?:[0-9a-f]{2}:){7}[0-9a-f]{2}',
                     re.IGNORECASE)
# A host name: RFC 1123 labels, '_' tolerated (Nova's CONF.host is free).
_HOST_RE = re.compile(r'[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?'
                      r'(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*\.?',
                      re.IGNORECASE)


def _refuse(field: str, value: Any, grammar: str) -> NoReturn:
    # repr() shows a newline or comma an attacker hid in the value.
    raise exception.InvalidConnectorException(
        missing='%s: %r is not %s' % (field, value, grammar))


def is_iscsi_name(value: Any) -> TypeGuard[str]:
    """Whether *value* is an iSCSI name (``iqn.``, ``eui.`` or ``naa.``)."""
    return (isinstance(value, str) and
            len(value.encode('utf-8')) <= ISCSI_NAME_MAX_BYTES and
            any(r.fullmatch(value) for r in (_IQN_RE, _EUI_RE, _NAA_RE)))


def is_wwn(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and bool(_WWN_RE.fullmatch(value))


def is_host_name(value: Any) -> TypeGuard[str]:
    return (isinstance(value, str) and len(value) <= HOST_NAME_MAX and
            bool(_HOST_RE.fullmatch(value)))


def is_ip(value: Any) -> TypeGuard[str]:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def check_iscsi_name(value: Any, field: str = 'initiator') -> str:
    if not is_iscsi_name(value):
        _refuse(field, value, 'an iSCSI name (RFC 3720 iqn., eui. or naa.)')
    return value


def _check_wwns(connector: dict[str, Any], field: str) -> None:
    values = connector[field]
    if isinstance(values, str):
        values = [values]     # os-brick sends lists; Cinder accepts both
    if not isinstance(values, (list, tuple)) or not values:
        _refuse(field, connector[field], 'a non-empty list of WWNs')
    for value in values:
        if not is_wwn(value):
            _refuse(field, value, 'a WWN (16 hex digits)')


def check(connector: Any, required: Iterable[str] = ()
          ) -> dict[str, Any]:
    """Check every tool-facing field present in *connector*.

    :param required: fields that must be present (e.g. ``('initiator',)``
        for iSCSI).
    :raises InvalidConnectorException: naming the first bad field.
    """
    if not isinstance(connector, dict):
        raise exception.InvalidConnectorException(
            missing='a connector dictionary (got %s)' %
            type(connector).__name__)
    for field in required:
        if connector.get(field) in (None, '', []):
            raise exception.InvalidConnectorException(missing=field)
    if connector.get('initiator') is not None:
        check_iscsi_name(connector['initiator'])
    for field in ('wwpns', 'wwnns'):
        if connector.get(field) is not None:
            _check_wwns(connector, field)
    if connector.get('host') is not None:
        host = connector['host']
        if not (is_host_name(host) or is_ip(host)):
            _refuse('host', host, 'a host name or IP address')
    if connector.get('ip') is not None and not is_ip(connector['ip']):
        _refuse('ip', connector['ip'], 'an IP address')
    return connector
