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
