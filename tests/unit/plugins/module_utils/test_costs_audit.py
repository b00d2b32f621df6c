# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one storage price definition and the audit's rows and totals built on it."""

from __future__ import annotations

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._audit import (
    audit_document,
    billing_total,
    guessed_run_id,
)
from ansible_collections.trainops.gpu.plugins.module_utils._costs import PRICES, pod_cost_now, pod_storage, prices


def pod(pid, name, status="RUNNING", cost=0.69, volume_gb=20, network=None):
    return {"id": pid, "name": name, "status": status, "cost_per_hr": cost if status == "RUNNING" else 0.0,
            "persistent_volume": {"size": volume_gb, "path": "/workspace"} if volume_gb else None,
            "container_disk": 10, "network_volume": {"id": network, "path": "/runpod"} if network else None,
            "gpu_type": "NVIDIA GeForce RTX 4090", "gpu_count": 1, "cloud": "SECURE",
            "data_center_id": "EU-RO-1"}  # fmt: skip


def test_overrides_go_on_top_of_the_published_prices_without_changing_them():
    merged = prices({"volume_stopped": 0.3, "network_volume": {"HIGH_PERFORMANCE": 0.2}})
    assert merged["volume_stopped"] == 0.3 and merged["network_volume"] == {"STANDARD": 0.07, "HIGH_PERFORMANCE": 0.2}
    assert PRICES["volume_stopped"] == 0.20 and PRICES["network_volume"]["HIGH_PERFORMANCE"] == 0.14
    assert prices() == PRICES and prices() is not PRICES


def test_a_pods_storage_running_and_stopped():
    storage = pod_storage(pod("p1", "trainops-r1-train"), prices())
    assert storage == {
        "volume_gb": 20,
        "container_disk_gb": 10,
        "stopped_per_month": 4.0,
        "stopped_per_hour": round(4.0 / 730, 6),
        "running_storage_per_month": 3.0,
        "prices": PRICES,
    }
    assert pod_storage({}, prices())["stopped_per_month"] == 0.0
    assert pod_storage(pod("p2", "x", volume_gb=0), prices())["volume_gb"] == 0


def test_a_stopped_pod_bills_its_volume_disk_per_hour_and_a_running_one_its_api_rate():
    stopped = pod_cost_now(pod("p1", "x", status="EXITED"), prices())
    assert stopped["stopped"] and stopped["storage_per_month_stopped"] == 4.0
    assert stopped["cost_per_hour_now"] == round(4.0 / 730, 6) and stopped["cost_per_hour_api"] == 0.0
    running = pod_cost_now(pod("p2", "x"), prices())
    assert not running["stopped"] and running["storage_per_month_stopped"] is None
    assert running["cost_per_hour_now"] == 0.69


def test_the_run_id_is_guessed_from_our_pod_names_only():
    assert guessed_run_id("trainops-lost-run-train", "trainops-") == "lost-run"
    assert guessed_run_id("someone-else", "trainops-") is None
    assert guessed_run_id(None, "trainops-") is None


def test_billing_total_prefers_the_reported_total():
    assert billing_total({"metadata": {"totals": {"totalAmount": 1.5}}, "records": [{"totalAmount": 9}]}) == 1.5
    assert billing_total({"records": [{"totalAmount": 1}, {"totalAmount": None}, {"totalAmount": 0.5}]}) == 1.5
    assert billing_total({}) == 0.0


@pytest.fixture
def document():
    pods = [
        pod("orphan1", "trainops-lost-run-train"),
        pod("rec1", "trainops-r1-train", network="vol2"),
        pod("stop1", "trainops-r1-eval", status="EXITED"),
        pod("foreign1", "someone-else"),
    ]
    volumes = [
        {"id": "vol1", "name": "trainops-cache", "size": 50, "data_center": "EU-RO-1", "type": "STANDARD"},
        {"id": "vol2", "name": "shared", "size": 10, "data_center": "EU-RO-1", "type": "HIGH_PERFORMANCE"},
    ]
    states = [
        ("/runs/r1/state.json", {"run_id": "r1", "resources": [
            {"kind": "pod", "id": "rec1", "name": "trainops-r1-train", "status": "RUNNING"},
            {"kind": "pod", "id": "stop1", "status": "EXITED"},
            {"kind": "pod", "id": "gone1", "name": "trainops-r1-old", "status": "RUNNING"},
            {"kind": "pod", "id": "gone2", "status": "TERMINATED", "final": {"status": "TERMINATED"}},
            {"kind": "network_volume", "id": "vol2"}]}),
        ("/runs/r2/state.json", {"resources": [{"kind": "pod", "id": "rec1"}]}),
    ]  # fmt: skip
    billing = {
        "pods": {"records": [{"pod_id": "orphan1", "total_amount": 1.0}, {"pod_id": "orphan1", "total_amount": 0.5}],
                 "metadata": {"bucket_size": "day"}},
        "network_volumes": {"records": [{"network_volume_id": "vol1", "total_amount": 0.25}]},
        "total_amount": 1.75,
    }  # fmt: skip
    requested = {"bucket_size": "day", "last_n": 30}
    return audit_document(pods, volumes, states, billing, "trainops-", prices(), requested)


def test_rows_say_what_is_ours_what_is_orphaned_and_how_to_tear_it_down(document):
    rows = {row["id"]: row for row in document["pods"]}
    assert document["orphans"] == ["orphan1"]
    assert rows["orphan1"]["teardown_command"] == (
        "ansible-playbook playbooks/teardown.yml -e teardown_run_id=lost-run -e teardown_pod=orphan1"
        " -e teardown_confirm=orphan1"
    )
    assert rows["rec1"]["runs"] == ["r1", "r2"] and rows["rec1"]["network_volume_id"] == "vol2"
    assert rows["stop1"]["teardown_command"].endswith(" -e teardown_start_stopped=true")
    assert rows["stop1"]["storage_per_month_stopped"] == 4.0
    assert not rows["foreign1"]["ours"] and rows["foreign1"]["teardown_command"] is None
    assert rows["orphan1"]["billed_in_window"] == 1.5 and rows["rec1"]["billed_in_window"] == 0.0
    assert document["recorded_but_gone"] == [
        {"run_id": "r1", "id": "gone1", "name": "trainops-r1-old", "recorded_status": "RUNNING",
         "terminate_recorded": False},
        {"run_id": "r1", "id": "gone2", "name": None, "recorded_status": "TERMINATED", "terminate_recorded": True},
    ]  # fmt: skip


def test_volume_rows_and_totals(document):
    vols = {row["id"]: row for row in document["network_volumes"]}
    assert vols["vol1"]["unattached"] and vols["vol1"]["orphan"] and vols["vol1"]["cost_per_month"] == 3.5
    assert vols["vol2"]["attached_pods"] == ["rec1"] and vols["vol2"]["runs"] == ["r1"]
    assert vols["vol2"]["cost_per_month"] == pytest.approx(1.4)
    assert document["unattached_volumes"] == ["vol1"] and document["orphaned_volumes"] == ["vol1"]
    totals = document["totals"]
    per_hour = 3 * 0.69 + round(4.0 / 730, 6) + round(3.5 / 730, 6) + round(1.4 / 730, 6)
    assert totals["per_hour_now"] == pytest.approx(per_hour, abs=1e-6)
    assert totals["not_ours_per_hour_now"] == 0.69 and totals["running_pods_per_hour"] == pytest.approx(3 * 0.69)
    assert totals["stopped_storage_per_month"] == 4.0 and totals["network_volumes_per_month"] == pytest.approx(4.9)
    assert totals["per_month_at_current_rates"] == pytest.approx(per_hour * 730, abs=0.01)
    assert (totals["pods"], totals["network_volumes"]) == (4, 2)
    billing = document["billing"]
    assert billing["by_resource"] == {"orphan1": 1.5, "vol1": 0.25}
    assert (billing["pods_amount"], billing["network_volumes_amount"], billing["total_amount"]) == (1.5, 0.25, 1.75)
    assert billing["window"] == {"bucket_size": "day"} and billing["requested"] == {"bucket_size": "day", "last_n": 30}
    assert document["runs_read"] == ["/runs/r1/state.json", "/runs/r2/state.json"]


def test_what_a_pod_leaves_billing_in_a_record_and_a_sentence():
    from ansible_collections.trainops.gpu.plugins.module_utils._costs import billing_now

    running = billing_now(pod("p1", "x"), "p1", prices())
    assert running["bills"] == "compute" and running["cost_per_hour"] == 0.69
    assert running["sentence"] == "pod p1 is RUNNING: it bills compute and disks at 0.69 USD/h (the API's rate)."
    stopped = billing_now(pod("p2", "x", status="EXITED"), "p2", prices())
    assert stopped["bills"] == "storage" and stopped["cost_per_hour"] == round(4.0 / 730, 6)
    assert stopped["sentence"] == f"pod p2 is EXITED: it bills its 20 GB volume disk, {round(4.0 / 730, 6):g} USD/h."
    bare = billing_now(pod("p3", "x", status="EXITED", volume_gb=0), "p3", prices())
    assert bare["bills"] == "nothing" and bare["cost_per_hour"] == 0.0
    for gone in (None, {}, pod("p4", "x", status="TERMINATED")):
        assert billing_now(gone, "p4", prices())["sentence"] == "pod p4 is TERMINATED: nothing is left billing."
    from ansible_collections.trainops.gpu.plugins.module_utils._costs import volume_billing_now

    volume = volume_billing_now({"id": "v1", "size": 73, "type": "STANDARD"}, prices())
    assert volume["cost_per_hour"] == round(73 * 0.07 / 730, 6)
    assert volume["sentence"] == f"network volume v1 (73 GB) bills {round(73 * 0.07 / 730, 6):g} USD/h."
    unread = billing_now(None, "p5", prices(), read=False)
    assert unread["bills"] == "unknown" and unread["cost_per_hour"] is None
    assert "p5 could not be read" in unread["sentence"]
