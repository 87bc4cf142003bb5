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

"""The environment of the Ceph clients we start (standard library only)."""

import os
from typing import Mapping, Optional


def clean_environ(environ: Optional[Mapping[str, str]] = None
                  ) -> dict[str, str]:
    """*environ* (default: ours) without any ``CEPH_*`` variable.

    Ceph reads CEPH_CONF, CEPH_KEYRING, CEPH_ARGS...: a shell that ran
    ``eval "$(ceph-dev.sh env)"`` must not steer what we run.
    """
    return {k: v for k, v in (os.environ if environ is None
                              else environ).items()
            if not k.startswith('CEPH_')}
