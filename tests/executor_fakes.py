"""What the sweep tests' fake executors share (pimrt.sweep.executors' interface): one task done
at each wait, nothing to release, no worker deaths, nothing to close."""


class QuietExecutor:
    retries_lost = True

    def wait(self, handles, seconds):
        return {handles[0]}

    def release(self, h):
        pass

    def deaths(self, handles, settle=1.0):
        return []

    def close(self, cancel=False):
        pass
