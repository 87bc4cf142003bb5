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

"""Exceptions raised by cinder-forcedetach."""

from cinder import exception
from cinder.i18n import _


class ForceDetachFailed(exception.VolumeBackendAPIException):
    """A force-detach step failed; Cinder's database was left unchanged."""

    message = _("Force-detach of volume %(volume_id)s failed at step "
                "%(step)s; the Cinder database was not changed: %(reason)s")


class TargetDaemonUnavailable(exception.VolumeBackendAPIException):
    """The target daemon cannot be reached (it is down or not started)."""

    message = _("iSCSI target daemon unavailable: %(reason)s")


class TargetCommandFailed(exception.VolumeBackendAPIException):
    """The target daemon rejected a command for another reason than absence."""

    message = _("iSCSI target command %(command)s failed: %(reason)s")


class LockLost(exception.VolumeBackendAPIException):
    """The lock service no longer confirms the volume's lock is ours."""

    message = _("The lock of volume %(volume_id)s is no longer confirmed by "
                "the lock service (%(reason)s): stopped before %(step)s")
