"""tegrastats: the parser on real lines from several JetPack versions and modules, and the process handling with
a real child process: a small script named ``tegrastats``, first on PATH, prints real lines at the requested
interval (the stand-in for Jetson hardware, which cannot exist here) and is crashed, killed and stopped."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.wait import wait_until

from appliance.harness.processes import running
from appliance.health.metrics import ApplianceMetrics
from appliance.health.tegrastats import CpuCore, TegrastatsMonitor, parse_line, system_fields

# Real lines, copied verbatim from where they were posted:
# Jetson Nano, JetPack 4 (L4T 32.x), running detectnet; POM_* rails as "cur/avg" without units.
#   https://github.com/dusty-nv/jetson-inference/issues/1206 (comment of 2021-09-01)
NANO_JP4 = ("RAM 1504/3956MB (lfb 331x4MB) IRAM 0/252kB(lfb 252kB) CPU [44%@1479,22%@1479,26%@1479,14%@1479] "
            "EMC_FREQ 7%@1600 GR3D_FREQ 86%@921 NVDEC 716 VIC_FREQ 0%@140 APE 25 PLL@39C CPU@44C PMIC@100C "
            "GPU@42.5C AO@47.5C thermal@42.5C POM_5V_IN 4531/3285 POM_5V_GPU 1113/213 POM_5V_CPU 539/722")
# Jetson AGX Xavier, JetPack 4.2: rails named GPU, CPU, SOC... ("CPU 618/618" is a rail, "CPU [...]" the load),
# EMC_FREQ and GR3D_FREQ without a clock.
#   https://github.com/martinkersner/gtop/pull/7 (comment of 2019-06-17)
XAVIER_JP42 = ("RAM 14700/15692MB (lfb 3x2MB) SWAP 898/8192MB (cached 23MB) CPU [0%@1190,0%@1190,0%@1190,0%@1190,"
               "0%@1190,0%@1190,0%@1190,0%@1190] EMC_FREQ 0% GR3D_FREQ 0% AO@30C GPU@30.5C Tboard@31C Tdiode@32C "
               "AUX@30.5C CPU@31.5C thermal@30.8C PMIC@100C GPU 463/463 CPU 618/618 SOC 2936/2936 CV 0/0 "
               "VDDRQ 309/309 SYS5V 3306/3306")
# Jetson TX2 NX, JetPack 4.6 rev3, run without sudo: two cores off, no power rails at all.
#   https://github.com/rbonghi/jetson_stats/issues/187 (2021-12-20)
TX2NX_JP46 = ("RAM 1689/3825MB (lfb 339x4MB) SWAP 0/1913MB (cached 0MB) CPU [3%@345,off,off,0%@345,1%@345,1%@345] "
              "EMC_FREQ 0% GR3D_FREQ 0% PLL@50.5C MCPU@50.5C PMIC@50C GPU@50C BCPU@50.5C thermal@50.3C")
# Jetson Xavier NX, JetPack 5.1.2: date prefix, GR3D clock in brackets, rails in mW as "cur/avg".
#   https://github.com/waggle-sensor/jetson-exporter, tegrastats_test.go (TestParseTegraStatsXavierNXJetPack512)
XAVIERNX_JP512 = ("07-09-2024 13:31:31 RAM 3168/6851MB (lfb 2x4MB) SWAP 161/3426MB (cached 0MB) "
                  "CPU [23%@1397,17%@1192,16%@1190,13%@1190,23%@1190,10%@1190] EMC_FREQ 2%@204 GR3D_FREQ 0%@[114] "
                  "VIC_FREQ 115 APE 150 AUX@45C CPU@46.5C thermal@45.6C AO@45C GPU@45.5C PMIC@50C "
                  "VDD_IN 2763mW/2846mW VDD_CPU_GPU_CV 650mW/670mW VDD_SOC 650mW/711mW")
# Jetson Orin Nano 8 GB under load, JetPack 6 era tegrastats (2025): lower-case sensors, NVENC/OFA/PVA engines.
#   https://github.com/rbonghi/jetson_stats/issues/624 (2025-05-16)
ORIN_NANO_JP6 = ("05-15-2025 18:30:28 RAM 6982/7620MB (lfb 5x1MB) SWAP 2640/16384MB (cached 202MB) "
                 "CPU [97%@1984,95%@1984,95%@1984,91%@1984,88%@1984,93%@247] EMC_FREQ 18%@3199 GR3D_FREQ 84%@[713] "
                 "NVENC 1%@115 NVDEC 40%@115 NVJPG off NVJPG1 off VIC 31%@115 OFA off NVDLA0 off PVA0_FREQ off APE 174 "
                 "cv0@63.031C cpu@65.562C soc2@64.156C soc0@63.031C cv1@62.937C gpu@63.5C tj@65.562C soc1@64.718C "
                 "cv2@60.875C VDD_IN 17946mW/15710mW VDD_CPU_GPU_CV 8896mW/7585mW VDD_SOC 3923mW/3515mW")
REAL_LINES = [NANO_JP4, XAVIER_JP42, TX2NX_JP46, XAVIERNX_JP512, ORIN_NANO_JP6]


# -- the parser ----------------------------------------------------------------------------------------------
def test_jetpack4_nano_with_pom_rails() -> None:
    r = parse_line(NANO_JP4)
    assert (r.ram_used_mb, r.ram_total_mb, r.swap_used_mb) == (1504, 3956, None)  # this Nano had no swap
    assert r.cpus == tuple(CpuCore(load, 1479) for load in (44.0, 22.0, 26.0, 14.0))
    assert (r.emc_percent, r.emc_freq_mhz, r.gpu_percent, r.gpu_freq_mhz) == (7.0, 1600, 86.0, 921)
    assert r.temperatures_c == {"pll": 39.0, "cpu": 44.0, "pmic": 100.0, "gpu": 42.5, "ao": 47.5, "thermal": 42.5}
    assert r.power_mw == {"POM_5V_IN": 4531, "POM_5V_GPU": 1113, "POM_5V_CPU": 539}  # current, not the average


def test_jetpack42_xavier_rails_named_like_the_cpu_and_gpu() -> None:
    r = parse_line(XAVIER_JP42)
    assert len(r.cpus) == 8 and all(c == CpuCore(0.0, 1190) for c in r.cpus)
    assert (r.emc_percent, r.emc_freq_mhz, r.gpu_percent, r.gpu_freq_mhz) == (0.0, None, 0.0, None)
    assert r.power_mw == {"GPU": 463, "CPU": 618, "SOC": 2936, "CV": 0, "VDDRQ": 309, "SYS5V": 3306}
    assert r.temperatures_c["cpu"] == 31.5 and r.temperatures_c["tdiode"] == 32.0
    assert (r.swap_used_mb, r.swap_total_mb) == (898, 8192)


def test_jetpack46_cores_off_and_no_rails() -> None:
    r = parse_line(TX2NX_JP46)
    assert [c.load_percent for c in r.cpus] == [3.0, None, None, 0.0, 1.0, 1.0]
    assert r.cpus[1] == CpuCore(None, None)
    assert r.power_mw == {} and r.temperatures_c["mcpu"] == 50.5


def test_jetpack5_xavier_nx_mw_rails_and_bracketed_gpu_clock() -> None:
    r = parse_line(XAVIERNX_JP512)
    assert (r.ram_used_mb, r.ram_total_mb, r.swap_used_mb, r.swap_total_mb) == (3168, 6851, 161, 3426)
    assert [c.freq_mhz for c in r.cpus] == [1397, 1192, 1190, 1190, 1190, 1190]
    assert (r.emc_percent, r.emc_freq_mhz, r.gpu_percent, r.gpu_freq_mhz) == (2.0, 204, 0.0, 114)
    assert r.power_mw == {"VDD_IN": 2763, "VDD_CPU_GPU_CV": 650, "VDD_SOC": 650}


def test_jetpack6_orin_nano_under_load() -> None:
    r = parse_line(ORIN_NANO_JP6)
    assert (r.gpu_percent, r.gpu_freq_mhz, r.emc_percent, r.emc_freq_mhz) == (84.0, 713, 18.0, 3199)
    assert r.cpus[-1] == CpuCore(93.0, 247)
    assert r.temperatures_c["tj"] == 65.562 and r.temperatures_c["cv2"] == 60.875 and len(r.temperatures_c) == 9
    assert r.power_mw == {"VDD_IN": 17946, "VDD_CPU_GPU_CV": 8896, "VDD_SOC": 3923}
    assert (r.swap_used_mb, r.swap_total_mb) == (2640, 16384)


def test_documented_variants_and_unknown_tokens() -> None:
    # The per-core form with one shared clock ("CPU [X%,Y%, , ]@Z", L4T 32.5 tegrastats appendix), two GPCs,
    # an Orin sensor that is switched off (-256C), and tokens no JetPack printed: none of them raise.
    r = parse_line("CPU [2%,1%, , ]@102 GR3D_FREQ 0%@[0,611] CV0@-256C FOO@bar NEW_ENGINE 3%@9 RAM x/yMB "
                   "VDD_NEW 12mW/3mW BOGUS 1/2/3 GR3D_FREQ ?% EMC_FREQ")
    assert r.cpus == (CpuCore(2.0, 102), CpuCore(1.0, 102), CpuCore(None, None), CpuCore(None, None))
    assert (r.gpu_percent, r.gpu_freq_mhz) == (0.0, 611)
    assert r.temperatures_c == {} and r.power_mw == {"VDD_NEW": 12} and r.ram_used_mb is None
    for junk in ("", "\n", "tegrastats: permission denied", "CPU [", "CPU [44%@1479", "GR3D_FREQ", "RAM"):
        assert parse_line(junk).empty


@pytest.mark.parametrize("line", REAL_LINES, ids=["nano-jp4", "xavier-jp42", "tx2nx-jp46", "xaviernx-jp512",
                                                  "orin-nano-jp6"])
def test_every_real_line_gives_memory_cpu_and_temperatures(line: str) -> None:
    r = parse_line(line)
    assert r.ram_used_mb and r.ram_total_mb and r.cpus and r.temperatures_c and r.gpu_percent is not None


def test_system_fields_for_the_mqtt_health_message() -> None:
    fields = system_fields(parse_line(ORIN_NANO_JP6))
    assert fields["gpu_load_percent"] == 84.0 and fields["emc_freq_mhz"] == 3199
    assert fields["cpu_cores_online"] == 6 and fields["tegra_temp_tj"] == 65.562
    assert fields["power_VDD_IN_w"] == pytest.approx(17.946)
    assert all(isinstance(v, (int, float)) for v in fields.values())
    assert system_fields(parse_line(TX2NX_JP46))["cpu_cores_online"] == 4


def test_metrics_from_a_reading() -> None:
    metrics = ApplianceMetrics()
    metrics.record_tegrastats(parse_line(NANO_JP4))
    metrics.record_tegrastats(parse_line(TX2NX_JP46), restarts=2)  # cores 1 and 2 go off: their samples go
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}
    assert samples[("appliance_tegrastats_up", ())] == 1 and samples[("appliance_tegrastats_restarts_total", ())] == 2
    assert samples[("appliance_gpu_load_percent", ())] == 0.0
    assert samples[("appliance_cpu_core_load_percent", (("core", "0"),))] == 3.0
    assert ("appliance_cpu_core_load_percent", (("core", "1"),)) not in samples
    # the ratios: the line says "GR3D_FREQ 0%" and core 0 at "3%@345"
    assert samples[("appliance_gpu_load_ratio", ())] == 0.0
    assert samples[("appliance_cpu_core_load_ratio", (("core", "0"),))] == pytest.approx(0.03)
    assert ("appliance_cpu_core_load_ratio", (("core", "1"),)) not in samples
    assert ("appliance_cpu_core_freq_hertz", (("core", "2"),)) not in samples
    assert samples[("appliance_cpu_core_freq_hertz", (("core", "0"),))] == 345e6  # "3%@345" (MHz) in the line
    assert samples[("appliance_tegrastats_power_watts", (("rail", "POM_5V_IN"),))] == pytest.approx(4.531)
    assert samples[("appliance_tegrastats_temperature_celsius", (("sensor", "mcpu"),))] == 50.5
    assert samples[("appliance_tegrastats_ram_used_bytes", ())] == 1689 * 1024 * 1024
    metrics.record_tegrastats(None, restarts=3)
    assert b"appliance_tegrastats_up 0.0" in metrics.render()


# -- the process, with a real child named tegrastats -----------------------------------------------------------
FAKE = """#!{python}
# Stand-in for NVIDIA's tegrastats: prints the lines of $FAKE_TEGRASTATS_LINES every --interval ms.
import os, signal, sys, time
interval = int(sys.argv[sys.argv.index("--interval") + 1]) / 1000
with open(os.environ["FAKE_TEGRASTATS_STARTS"], "a") as f:
    f.write(f"{{os.getpid()}}\\n")
if os.environ.get("FAKE_TEGRASTATS_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
lines = open(os.environ["FAKE_TEGRASTATS_LINES"]).read().splitlines()
exit_after = int(os.environ.get("FAKE_TEGRASTATS_EXIT_AFTER", "0"))
n = 0
while True:
    print(lines[n % len(lines)], flush=True)
    n += 1
    if exit_after and n >= exit_after:
        print("NvRmMemInitNvmap failed with Permission denied", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(interval)
"""


class FakeTegrastats:
    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        script = self.bin / "tegrastats"
        script.write_text(FAKE.format(python=sys.executable))
        script.chmod(0o755)
        self.lines = root / "lines.txt"
        self.lines.write_text("\n".join(REAL_LINES) + "\n")
        self.starts_file = root / "starts.txt"
        self.starts_file.touch()

    def pids(self) -> list[int]:
        return [int(p) for p in self.starts_file.read_text().split()]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTegrastats:
    f = FakeTegrastats(tmp_path)
    monkeypatch.setenv("PATH", f"{f.bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TEGRASTATS_LINES", str(f.lines))
    monkeypatch.setenv("FAKE_TEGRASTATS_STARTS", str(f.starts_file))
    return f


@pytest.fixture
def monitors() -> Iterator[list[TegrastatsMonitor]]:
    made: list[TegrastatsMonitor] = []
    yield made
    for m in made:
        m.stop(timeout=5)


def test_reads_lines_from_the_child_and_stops_it(fake: FakeTegrastats, monitors: list) -> None:
    monitor = TegrastatsMonitor(interval_ms=100)
    monitors.append(monitor)
    assert monitor.start() and monitor.active
    reading = wait_until(monitor.latest)
    assert reading.ram_total_mb in {parse_line(line).ram_total_mb for line in REAL_LINES}
    # it keeps reading: every real line comes through in turn (each has its own RAM total)
    seen: set[int | None] = set()

    def every_line_seen() -> bool:
        latest = monitor.latest(max_age_s=60)
        seen.add(latest.ram_total_mb if latest else None)
        return seen >= {parse_line(line).ram_total_mb for line in REAL_LINES}

    wait_until(every_line_seen)
    (pid,) = fake.pids()
    assert monitor.status()["pid"] == pid and monitor.health() == "ok"
    monitor.stop(timeout=5)
    assert not running(pid) and monitor.status()["state"] == "stopped" and not monitor.active
    assert not any(t.name.startswith("tegrastats") and t.is_alive() for t in threading.enumerate())
    assert fake.pids() == [pid]  # stopping is not a crash: no restart


def test_a_crashing_child_is_restarted_with_backoff_and_reported(fake: FakeTegrastats, monitors: list,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TEGRASTATS_EXIT_AFTER", "2")
    monitor = TegrastatsMonitor(interval_ms=100, initial_backoff_s=0.05, max_backoff_s=0.2)
    monitors.append(monitor)
    monitor.start()
    wait_until(lambda: len(fake.pids()) >= 4)
    status = monitor.status()
    assert status["exits"] >= 3 and status["starts"] >= 4
    assert "exited with code 3: NvRmMemInitNvmap failed with Permission denied" in str(status["last_error"])
    assert monitor.latest() is not None  # lines of the children that ran
    monitor.stop(timeout=5)
    assert not any(running(pid) for pid in fake.pids())


def test_a_killed_child_is_replaced(fake: FakeTegrastats, monitors: list) -> None:
    monitor = TegrastatsMonitor(interval_ms=100, initial_backoff_s=0.05)
    monitors.append(monitor)
    monitor.start()
    wait_until(monitor.latest)
    (first,) = fake.pids()
    os.kill(first, signal.SIGKILL)
    second = wait_until(lambda: fake.pids()[1:] and fake.pids()[1])
    assert second != first and wait_until(lambda: monitor.status()["pid"] == second)
    assert "code -9" in str(monitor.status()["last_error"]) and monitor.exits == 1


def test_a_child_that_ignores_sigterm_is_killed(fake: FakeTegrastats, monitors: list,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TEGRASTATS_IGNORE_TERM", "1")
    monitor = TegrastatsMonitor(interval_ms=100)
    monitors.append(monitor)
    monitor.start()
    wait_until(monitor.latest)
    (pid,) = fake.pids()
    monitor.stop(timeout=0.5)
    assert not running(pid)


def test_no_binary_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monitor = TegrastatsMonitor()
    assert monitor.start() is False
    assert monitor.status()["state"] == "absent" and not monitor.active and monitor.latest() is None
    monitor.stop()  # harmless
    assert monitor.health() == "absent"


def test_an_old_reading_is_not_reported_as_current(fake: FakeTegrastats, monitors: list,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setenv("FAKE_TEGRASTATS_EXIT_AFTER", "1")  # one line, then the child is gone
    monitor = TegrastatsMonitor(interval_ms=1000, initial_backoff_s=3600, clock=lambda: now[0])
    monitors.append(monitor)
    monitor.start()
    assert wait_until(monitor.latest) == parse_line(REAL_LINES[0])
    wait_until(lambda: monitor.status()["state"] == "restarting")
    assert monitor.health() == "restarting"
    now[0] += 5.0
    assert monitor.latest() is not None  # three intervals or 5 s: still current
    now[0] += 0.5
    assert monitor.latest() is None and monitor.latest(max_age_s=60) is not None


# -- wired into the supervisor ---------------------------------------------------------------------------------
def _appliance(tmp_path: Path, **health: Any) -> Any:
    from appliance.appconfig.app import AppConfig
    from appliance.supervisor.app import Appliance

    return Appliance(AppConfig.model_validate({
        "device": {"id": "dev1"}, "mqtt": {"host": "127.0.0.1"}, "paths": {"state_dir": str(tmp_path / "state")},
        "health": {"tegrastats_interval_ms": 100, **health},
        "cameras": [{"id": "cam0", "width": 64, "height": 48, "fps": 1,
                     "source": {"type": "images", "path": str(tmp_path)}}]}))


def test_the_supervisor_feeds_metrics_and_the_mqtt_health_system_section(tmp_path: Path,
                                                                          fake: FakeTegrastats) -> None:
    import jsonschema

    from appliance.mqtt.schema import load_schema

    app = _appliance(tmp_path)
    app._start_tegrastats()  # the first step of Appliance.start(); the rest needs Triton and a broker
    try:
        wait_until(app._tegrastats.latest)
        app.tick()
        system = app._health_for_mqtt()["system"]
    finally:
        app.stop()
    assert system["tegrastats"] == "ok" and isinstance(system["gpu_load_percent"], float)
    assert any(key.startswith("tegra_temp_") for key in system) and system["cpu_cores_online"] >= 4
    readings = load_schema("health")["$defs"]["readings"]  # what the health message allows in "system"
    jsonschema.Draft202012Validator(readings).validate(system)
    text = app.metrics.render().decode()
    assert "appliance_tegrastats_up 1.0" in text and "appliance_gpu_load_percent" in text
    assert not any(running(pid) for pid in fake.pids())  # stop() stopped the child


def test_the_supervisor_without_tegrastats_or_with_it_turned_off(tmp_path: Path, fake: FakeTegrastats,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    off = _appliance(tmp_path, tegrastats_interval_ms=None)
    off._start_tegrastats()
    off.tick()
    assert "tegrastats" not in off._health_for_mqtt()["system"] and fake.pids() == []
    off.stop()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    absent = _appliance(tmp_path)
    absent._start_tegrastats()
    absent.tick()
    assert "tegrastats" not in absent._health_for_mqtt()["system"]
    text = absent.metrics.render()
    assert b"appliance_tegrastats" not in text and b"appliance_gpu_load" not in text  # not a GPU load of 0
    absent.stop()
