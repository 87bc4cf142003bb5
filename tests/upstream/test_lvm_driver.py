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

"""Upstream's LVM driver tests (from the cinder wheel) on our driver.

The module names the driver ``lvm.LVMVolumeDriver`` (and, as a string,
``cinder.volume.drivers.lvm.LVMVolumeDriver`` for its volume manager): both
resolve to :class:`cinder_forcedetach.drivers.lvm.LVMVolumeDriver`.
"""

from cinder import objects

objects.register_all()  # upstream's lvm module annotates with objects.Volume

from cinder_forcedetach.drivers import lvm as our_lvm  # noqa: E402
from tests import upstream  # noqa: E402

UPSTREAM = 'cinder.tests.unit.volume.drivers.test_lvm_driver'

module = upstream.load_upstream(UPSTREAM, 'cinder.volume.drivers.lvm',
                                LVMVolumeDriver=our_lvm.LVMVolumeDriver)
upstream.mark_differences(module, UPSTREAM)


def load_tests(loader, standard_tests, pattern):
    return loader.loadTestsFromModule(module)
