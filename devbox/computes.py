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

"""The box's compute hosts (``--computes N``): their names.

Shared by Nova's service (a ``nova-compute`` process per host) and
libvirt's (a ``libvirtd`` per host).  The first host keeps the names of a
one-compute box (``box-compute``, ``nova-compute``, ``libvirtd``); the
second is ``box-compute-2`` (``nova-compute-2``, ``libvirtd-2``): an
evacuation needs a host to go to.
"""

#: The first compute host's name.
COMPUTE_HOST = 'box-compute'
#: Compute hosts a box can run.
MAX_COMPUTES = 2


def compute_hosts(info):
    """Host names of the computes of a stack with settings *info*."""
    count = info.get('computes') or 1
    return [COMPUTE_HOST] + ['%s-%d' % (COMPUTE_HOST, i)
                             for i in range(2, count + 1)]


def suffix(host):
    """What *host*'s process and directory names add: '' or ``-N``."""
    return host[len(COMPUTE_HOST):]


def host_of(process, binary):
    """The host of *binary*'s process *process* (``libvirtd-2``), or None.

    The inverse of naming a host's process ``binary + suffix(host)``.
    """
    if not process.startswith(binary):
        return None
    return COMPUTE_HOST + process[len(binary):]
