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

"""Our tgt driver with a fault hook a test arms: SIGKILL or pause at a point.

Loaded by a real ``cinder-volume`` process of the box (``volume_driver =
tests.functional.faulty_driver.FaultyTgtISCSIDriver``, the repository on
``PYTHONPATH``).  A test arms a point by writing its name to
``<state_path>/faults/armed``; the first volume service of the cluster to
reach that point claims the file (an atomic rename to ``fired.<pid>``) and
SIGKILLs itself and its launcher (the service's recorded process).  Armed
as ``pause <point>``, the service renames the file ``paused.<pid>`` instead
and waits there until the test writes ``<state_path>/faults/resume``.
Nothing else changes: unarmed, this is the tgt driver.

Points: ``after:<Task>`` for every task of the force-detach flow,
``after:<driver method>`` for the driver calls Cinder's manager makes,
``before:grant`` in ``initialize_connection`` between its checks (the
volume's lock taken, the backend's holders read) and the grant itself,
``before:ensure_export`` likewise in the re-export at start-up, and
``after:write`` after each write of an image onto a volume (the first one
armed fires).  A ``before:`` point armed as ``<point>@<volume id>`` fires
for that volume only.
"""

import functools
import os
import signal
import time

from oslo_config import cfg

from cinder_forcedetach.drivers import iscsi
from cinder_forcedetach.flows import force_detach

CONF = cfg.CONF
FLOW_TASKS = [
    force_detach.LockVolumeTask, force_detach.ResolveAttachmentsTask,
    force_detach.RecordTeardownTask, force_detach.NotifyTask,
    force_detach.DisconnectLocalHostTask, force_detach.RevokeHostAccessTask,
    force_detach.FenceClientsTask, force_detach.RemoveExportTask,
    force_detach.ResetDatabaseTask, force_detach.ReleaseLockTask,
]
DRIVER_METHODS = ('initialize_connection', 'terminate_connection',
                  'remove_export', 'ensure_export', 'discard_volume',
                  'copy_image_to_volume')


def faults_dir():
    return os.path.join(CONF.state_path, 'faults')


def fault_point(name, volume_id=None):
    """Die here (SIGKILL, no cleanup) if a test armed *name*."""
    armed = os.path.join(faults_dir(), 'armed')
    try:
        with open(armed) as f:
            wanted = f.read().strip()
    except OSError:
        return
    if volume_id and wanted.endswith('@' + volume_id):
        wanted = wanted[:-len(volume_id) - 1]
    if wanted == 'pause ' + name:
        _pause()
        return
    if wanted != name:
        return
    # The backend runs in a child of the cinder-volume launcher (which
    # would respawn it): the whole service dies, launcher first.
    service = os.getpid()
    if _is_volume_service(os.getppid()):
        service = os.getppid()
    try:
        os.rename(armed, os.path.join(faults_dir(), 'fired.%d' % service))
    except OSError:
        return      # another service claimed it first
    if service != os.getpid():
        os.kill(service, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _pause(timeout=300):
    try:
        os.rename(os.path.join(faults_dir(), 'armed'),
                  os.path.join(faults_dir(), 'paused.%d' % os.getpid()))
    except OSError:
        return      # another service claimed it first
    resume = os.path.join(faults_dir(), 'resume')
    deadline = time.monotonic() + timeout
    while not os.path.exists(resume) and time.monotonic() < deadline:
        time.sleep(0.2)


def _is_volume_service(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return b'cinder-volume' in f.read()
    except OSError:
        return False


def _after(name, call):
    # functools.wraps keeps the signature taskflow binds arguments by.
    @functools.wraps(call)
    def wrapped(*args, **kwargs):
        result = call(*args, **kwargs)
        fault_point('after:' + name)
        return result
    return wrapped


def _before(name, call, volume_arg):
    @functools.wraps(call)
    def wrapped(*args, **kwargs):
        fault_point('before:' + name, args[volume_arg].id)
        return call(*args, **kwargs)
    return wrapped


for _task in FLOW_TASKS:
    if not getattr(_task.execute, 'fault_hooked', False):
        _task.execute = _after(_task.__name__, _task.execute)
        _task.execute.fault_hooked = True


class FaultyTgtISCSIDriver(iscsi.TgtISCSIDriver):
    """:class:`TgtISCSIDriver` with fault points after Cinder's calls."""

    def __init__(self, *args, **kwargs):
        super(FaultyTgtISCSIDriver, self).__init__(*args, **kwargs)
        # The mixin wraps these on the instance; wrap what Cinder calls.
        for name in DRIVER_METHODS:
            setattr(self, name, _after(name, getattr(self, name)))
        self.initialize_connection_unlocked = _before(
            'grant', self.initialize_connection_unlocked, 0)
        self.ensure_export_unlocked = _before(
            'ensure_export', self.ensure_export_unlocked, 1)

    def open_volume_for_write(self, volume):
        return _FaultyFile(super(FaultyTgtISCSIDriver,
                                 self).open_volume_for_write(volume))


class _FaultyFile(object):
    """A volume's file object with the ``after:write`` fault point."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        written = self._f.write(data)
        self._f.flush()
        fault_point('after:write')
        return written

    def __getattr__(self, name):
        return getattr(self._f, name)
