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

"""The developer box ``tools/stack.sh`` runs: MariaDB, etcd, RabbitMQ,
tgtd, Ceph, Keystone, Glance, Placement, Nova, Neutron and Cinder's
services on loopback.

Not part of the ``cinder-forcedetach`` wheel: a Cinder node never imports
it.  ``tools/install-deps.sh`` installs it (``pip install -e devbox``, its
own distribution ``cinder-forcedetach-devbox``) for the entry point of the
box's Neutron mechanism driver.
"""
