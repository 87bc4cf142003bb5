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

"""The box's services, one module each, and their registry.

:func:`registry` orders them by ``requires`` (a service starts after the
ones it requires; otherwise in the order of :data:`SERVICES`).  The list
of the box's processes is the enabled services' processes in that order:
it is written nowhere else.
"""

import collections

from devbox.services import ceph
from devbox.services import cinder
from devbox.services import etcd
from devbox.services import glance
from devbox.services import horizon
from devbox.services import keystone
from devbox.services import libvirt
from devbox.services import mariadb
from devbox.services import neutron
from devbox.services import nova
from devbox.services import placement
from devbox.services import rabbitmq
from devbox.services import tgtd

#: Every service of the box, in the order that breaks ``requires`` ties.
SERVICES = (rabbitmq.RabbitMQ, mariadb.MariaDB, etcd.Etcd, tgtd.Tgtd,
            ceph.Ceph, keystone.Keystone, glance.Glance,
            placement.Placement, neutron.Neutron, cinder.Cinder,
            libvirt.Libvirt, nova.Nova, horizon.Horizon)


def ordered(classes):
    """*classes* instantiated, each after the ones it ``requires``.

    Kahn's algorithm taking the first ready service of *classes* each
    time; a missing or circular requirement raises ValueError.
    """
    pending = [cls() for cls in classes]
    names = {svc.name for svc in pending}
    for svc in pending:
        unknown = set(svc.requires) - names
        if unknown:
            raise ValueError('%s requires unknown %s' % (
                svc.name, ', '.join(sorted(unknown))))
    done = collections.OrderedDict()
    while pending:
        ready = [svc for svc in pending if set(svc.requires) <= set(done)]
        if not ready:
            raise ValueError('circular requires among %s' % ', '.join(
                svc.name for svc in pending))
        done[ready[0].name] = ready[0]
        pending.remove(ready[0])
    return done


def registry():
    """{name: service} of the box, in start order."""
    return ordered(SERVICES)


def process_order(info, services=None):
    """Names of the stack's processes for settings *info*, in start order."""
    services = services or registry()
    return [name for svc in services.values() if svc.enabled(info)
            for name in svc.processes(info)]


def owner(services, process_name):
    """The service that runs *process_name*."""
    for svc in services.values():
        if process_name in svc.known_processes():
            return svc
    raise KeyError(process_name)
