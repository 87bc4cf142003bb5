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

"""The one poll-until of the tests, benchmarks and tools."""

import time


def wait_for(predicate, timeout, what, interval=0.05, gone=None):
    """*predicate*'s first true result, polled every *interval* seconds.

    Fails (AssertionError) after *timeout* seconds, or as soon as
    *gone()* -- the process being waited on died -- says why.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        why = gone() if gone is not None else None
        if why:
            raise AssertionError('%s while waiting for %s' % (why, what))
        if time.monotonic() >= deadline:
            raise AssertionError('timed out after %ss waiting for %s' % (
                timeout, what))
        time.sleep(interval)
