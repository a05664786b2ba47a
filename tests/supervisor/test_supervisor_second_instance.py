"""A second `appliance run` on a state dir that another process holds exits 2 (systemd does not restart it) and
names the holder's pid, before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.cli import run_appliance
from support.daemon import make_camera_dir, write_config
from support.mosquitto import Mosquitto
from support.shm import private_shm_dir

from appliance.mqtt.config import SpoolConfig
from appliance.mqtt.spool import Spool

REPO = Path(__file__).resolve().parents[2]


def test_a_second_instance_on_the_same_state_dir_exits_2_naming_the_pid(tmp_path: Path) -> None:
    shm = private_shm_dir("appliance-twin", check_leaks=False)
    broker = Mosquitto(tmp_path / "broker")  # never started: the start stops before it connects
    config = write_config(tmp_path, broker, next(shm), make_camera_dir(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from appliance.mqtt.spool import Spool; from appliance.mqtt.config import SpoolConfig;"
                               f"s = Spool(Path({str(tmp_path / 'state' / 'mqtt-spool.sqlite3')!r}), SpoolConfig());"
                               "s.open(); print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        second = run_appliance("run", "--config", str(config), expect=None)
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"in use by another process (pid {holder.pid})" in second.stderr, second.stderr[-3000:]
    finally:
        holder.kill()
        holder.wait()
        next(shm, None)
    spool = Spool(tmp_path / "state" / "mqtt-spool.sqlite3", SpoolConfig())
    spool.open()  # the holder gone, the state dir is free again
    spool.close()
