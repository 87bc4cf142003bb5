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

"""The interface between a driver and the block target that exports volumes.

A driver never talks to a target daemon itself: it asks an
:class:`ExportTarget` to export, grant, revoke and unexport, as Cinder keeps
``volume/targets/`` apart from ``volume/drivers/``.  Every revoking call is
idempotent: what is already gone counts as done.
"""

import abc
import dataclasses
from typing import Iterable, Optional


@dataclasses.dataclass
class Session(object):
    """One initiator session (I_T nexus) on a target."""

    sid: int
    initiator: str
    connections: list


@dataclasses.dataclass
class TargetState(object):
    """What the target daemon really has for one exported volume."""

    tid: int
    name: str
    luns: list = dataclasses.field(default_factory=list)
    sessions: list = dataclasses.field(default_factory=list)
    accounts: list = dataclasses.field(default_factory=list)
    acls: list = dataclasses.field(default_factory=list)
    address_acls: list = dataclasses.field(default_factory=list)

    # acls: initiator-name rules; address_acls: initiator-address rules
    # (``ALL``, an IP or network), which admit any initiator name from
    # those addresses.

    @property
    def initiators(self) -> list[str]:
        """Initiators that are granted access or still hold a session."""
        names = list(self.acls)
        names += [s.initiator for s in self.sessions
                  if s.initiator not in names]
        return names


class ExportTarget(object, metaclass=abc.ABCMeta):
    """A block target (iSCSI today) that exports volumes to initiators."""

    @abc.abstractmethod
    def find(self, name: str) -> Optional[TargetState]:
        """Return the :class:`TargetState` of target *name*, or None."""

    @abc.abstractmethod
    def export(self, name: str, path: str, username: Optional[str] = None,
               password: Optional[str] = None) -> TargetState:
        """Export *path* as target *name*; return its :class:`TargetState`.

        Exporting a target that already exists returns it unchanged.
        """

    @abc.abstractmethod
    def grant(self, name: str, initiator: str) -> None:
        """Allow *initiator* to log in to target *name*."""

    @abc.abstractmethod
    def revoke(self, name: str,
               initiators: Optional[Iterable[str]] = None,
               keep: Iterable[str] = ()) -> list[str]:
        """Forbid and disconnect *initiators* (all when None).

        *keep* names the initiators of attachments that stay: they keep
        access even where the target admitted hosts by address.  Returns
        the ACL entries left afterwards (empty when the target does not
        exist).
        """

    @abc.abstractmethod
    def unexport(self, name: str,
                 state: Optional[TargetState] = None) -> None:
        """Remove target *name*, its LUNs, sessions and CHAP account.

        *state*: its :class:`TargetState` if the caller just read it.
        """
