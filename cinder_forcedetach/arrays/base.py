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

"""The interface a storage vendor implements for the Fibre Channel driver.

An array has *target ports* (the WWPNs it exposes on the fabric), *hosts*
(initiator groups: a name and the WWPNs of its HBAs) and *LUN maps*
(volume -> host -> LUN id, also called LUN masking).  A host sees a volume
when the volume is mapped to it and the fabric zones its HBA with a target
port; the driver keeps the first, Cinder's zone manager the second.

Every removal is idempotent: removing what is already gone is a success.
A failure raises one of the exceptions below and changes nothing.
"""

import abc
import re
from typing import Iterable, Optional

from cinder import exception
from cinder.i18n import _

WWPN_RE = re.compile(r'^[0-9a-f]{16}$')


class ArrayError(exception.VolumeBackendAPIException):
    """The array refused or failed an operation; nothing was changed."""

    message = _("Storage array operation %(operation)s failed: %(reason)s")


class ArrayTimeout(ArrayError):
    """The array did not answer within the configured operation timeout."""

    message = _("Storage array operation %(operation)s timed out after "
                "%(timeout)s s: %(reason)s")


class HostBusy(ArrayError):
    """The array refuses to change a host that another operation holds."""

    message = _("Storage array host %(host)s is busy, %(operation)s "
                "refused: %(reason)s")


class HostConflict(ArrayError):
    """The WWPNs of one connector belong to several array hosts."""

    message = _("WWPNs %(wwpns)s belong to several array hosts "
                "(%(hosts)s); fix the array's host definitions")


def normalize_wwpn(wwpn: str) -> str:
    """``'50:01:43:80:12:34:56:78'``/``'0x5001...'`` -> ``'5001438012345678'``.

    Raises ValueError for anything that is not 16 hexadecimal digits, or
    for the all-zero WWPN.
    """
    if not isinstance(wwpn, str):
        raise ValueError('WWPN %r is not a string' % (wwpn,))
    value = wwpn.strip().lower()
    if value.startswith('0x'):
        value = value[2:]
    value = value.replace(':', '')
    if not WWPN_RE.match(value) or value == '0' * 16:
        raise ValueError('%r is not a WWPN (16 hexadecimal digits)' % wwpn)
    return value


class FCArray(object, metaclass=abc.ABCMeta):
    """A Fibre Channel array: target ports, hosts and LUN maps.

    WWPNs are passed and returned as 16 lowercase hexadecimal digits.
    """

    def setup(self) -> None:
        """Connect to the array / create what the array needs; idempotent."""

    @abc.abstractmethod
    def target_ports(self) -> list[str]:
        """WWPNs of the array's FC target ports that serve volumes."""

    @abc.abstractmethod
    def find_host(self, wwpns: Iterable[str]) -> Optional[str]:
        """Name of the host that owns any of *wwpns*, or None.

        Raises :class:`HostConflict` when they belong to several hosts.
        """

    @abc.abstractmethod
    def ensure_host(self, name: str, wwpns: Iterable[str]) -> str:
        """Return the host that owns *wwpns*, created or extended as needed.

        A host that already owns one of the WWPNs is reused whatever its
        name; otherwise a host named *name* (or, when another host already
        has that name, a name derived from it) is created.
        """

    @abc.abstractmethod
    def host_wwpns(self, host: str) -> list[str]:
        """WWPNs of *host*; empty when the host does not exist."""

    @abc.abstractmethod
    def delete_host(self, host: str) -> None:
        """Remove *host*; :class:`HostBusy` while it has LUNs mapped."""

    @abc.abstractmethod
    def map_volume(self, volume_name: str, host: str) -> int:
        """Map *volume_name* to *host*; return its LUN id.

        Mapping an already mapped volume returns the LUN id it has.
        """

    @abc.abstractmethod
    def unmap_volume(self, volume_name: str,
                     host: Optional[str] = None) -> list[str]:
        """Unmap the volume from *host* (every host when None).

        Returns the hosts the volume stays mapped to.  An unknown host or
        volume, or a volume that is not mapped, is a success.
        """

    @abc.abstractmethod
    def hosts_of_volume(self, volume_name: str) -> dict[str, int]:
        """``{host: lun}`` of the hosts the volume is mapped to."""

    def masking(self) -> dict[str, dict[str, list[str]]]:
        """{volume name: {host: [its WWPNs]}} of every mapped volume.

        One bulk read, for the audit; optional (default: not supported).
        """
        raise NotImplementedError()

    @abc.abstractmethod
    def luns_of_host(self, host: str) -> dict[str, int]:
        """``{volume_name: lun}`` of what is mapped to *host*."""
