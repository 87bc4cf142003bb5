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

"""Ceph client work of cinder-forcedetach, apart from any Cinder driver.

* :mod:`.cluster` -- a bounded-time librados connection per operation;
* :mod:`.fencing` -- who holds an image, which of them to fence, the
  blocklist and lock break, and the fence records operators list and lift;
* :mod:`.images` -- image I/O: file objects on RBD images, copy-on-write
  reimage, ``qemu-img`` from a same-cluster image.

The RBD driver (:mod:`cinder_forcedetach.drivers.rbd`, upstream's driver
plus these) and the ``cinder-forcedetach fence`` command use them.
"""
