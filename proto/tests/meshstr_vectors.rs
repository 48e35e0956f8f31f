//! Replays `vectors/meshstr/*.json`: the numbers meshstr/0-draft prints (the §6.6 table, the §6.4
//! worked example, the §6.2 receipt) and the generated cases for every branch of `class()`, the
//! window evaluation and the AIMD update (`vectors/meshstr/gen_window.py`, exact fractions apart
//! from the Rust code).

use serde_json::Value;
use weft_proto::meshstr::capacity::{self, DeclaredTotal, Rung};
use weft_proto::meshstr::limits::{Counter, Counters, Limit, Limits, Tier, ceiling, opening};
use weft_proto::meshstr::window::{
    self, Divergence, GrantState, Overrun, ScheduleRatio, Severity, class,
};

fn load(path: &str) -> Value {
    let full = format!("{}/../vectors/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn limits(v: &Value) -> Limits {
    let mut l = Limits::ZERO;
    for (k, x) in v.as_object().unwrap() {
        l.set(Limit::parse(k).unwrap(), u(x));
    }
    l
}

fn counters(v: &Value) -> Option<Counters> {
    if v.is_null() {
        return None;
    }
    Some(Counters::from_value(v).unwrap())
}

fn state(v: &Value) -> GrantState {
    GrantState {
        tier: Tier::parse(v["tier"].as_str().unwrap()).unwrap(),
        limits: limits(&v["limits"]),
        suspended_until: v["suspended_until"].as_u64(),
        idle_windows: u(&v["idle_windows"]) as u32,
        revoked: v["revoked"].as_bool().unwrap(),
    }
}

fn severity(v: &Value) -> Severity {
    Severity::parse(v.as_str().unwrap()).unwrap()
}

#[test]
fn meshstr_tier_ceilings_and_weights() {
    let v = load("meshstr/window.json");
    for (name, row) in v["ceilings"].as_object().unwrap() {
        let l = Limit::parse(name).unwrap();
        for (i, t) in Tier::ALL.into_iter().enumerate() {
            assert_eq!(ceiling(t, l), u(&row[i]), "{name} {}", t.as_str());
        }
    }
    for (name, w) in v["tier_weights"].as_object().unwrap() {
        let t = Tier::parse(name).unwrap();
        let milli = (w.as_str().unwrap().parse::<f64>().unwrap() * 1000.0).round() as u64;
        assert_eq!(t.weight_milli(), milli, "{name}");
    }
}

#[test]
fn meshstr_worked_numbers() {
    let v = load("meshstr/window.json");
    for w in v["worked"].as_array().unwrap() {
        let t = Tier::parse(w["tier"].as_str().unwrap()).unwrap();
        let l = Limit::parse(w["limit"].as_str().unwrap()).unwrap();
        let per = ceiling(t, l);
        assert_eq!(per, u(&w["per_grant"]));
        let aggregate = per * u(&w["grants"]);
        assert_eq!(aggregate, u(&w["expected"]), "{}", w["note"]);
        let mut agg = Counters::ZERO;
        agg.set(l.counter(), aggregate);
        let mut total = DeclaredTotal::default();
        total.0[l.counter() as usize] = Some(u(&w["declared_total"]));
        let p = capacity::pressure(&agg, &total).unwrap();
        assert_eq!(p.milli(), u(&w["pressure_milli"]));
        assert_eq!(Rung::reached_by(p).as_str(), w["rung"].as_str().unwrap());
    }
    let r = &v["receipt_window"];
    assert_eq!(
        weft_proto::meshstr::receipt::window_of(u(&r["at"]), u(&r["window_secs"])),
        u(&r["window"])
    );
    for s in v["schedule"].as_array().unwrap() {
        let milli =
            |k: &str| (s[k].as_str().unwrap().parse::<f64>().unwrap() * 1000.0).round() as u64;
        assert_eq!(
            ScheduleRatio(milli("ratio")).overrun_threshold_milli(),
            milli("overrun_threshold")
        );
    }
}

#[test]
fn meshstr_class_every_branch() {
    let v = load("meshstr/window.json");
    for c in v["class"].as_array().unwrap() {
        let got = class(
            Overrun::of(u(&c["measured"]), u(&c["limit"])),
            Divergence::of(u(&c["measured"]), u(&c["claimed"]), u(&c["floor"])),
        );
        assert_eq!(got, severity(&c["severity"]), "{}", c["branch"]);
    }
}

#[test]
fn meshstr_window_evaluation() {
    let v = load("meshstr/window.json");
    for c in v["evaluate"].as_array().unwrap() {
        let m = counters(&c["measured"]).unwrap();
        let claimed = counters(&c["claimed"]);
        let e = window::evaluate(&limits(&c["limits"]), &m, claimed.as_ref());
        let note = &c["note"];
        assert_eq!(e.severity, severity(&c["severity"]), "{note}");
        assert_eq!(
            e.active_silence,
            c["active_silence"].as_bool().unwrap(),
            "{note}"
        );
        assert_eq!(
            e.dup_ratio,
            c["dup_ratio"].as_str().map(|s| Severity::parse(s).unwrap()),
            "{note}"
        );
        for (i, s) in c["per_limit"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                e.per_limit[i],
                severity(s),
                "{note} {}",
                Limit::ALL[i].as_str()
            );
        }
    }
}

#[test]
fn meshstr_aimd_update_every_branch() {
    let v = load("meshstr/window.json");
    for c in v["update"].as_array().unwrap() {
        let before = state(&c["before"]);
        let m = counters(&c["measured"]);
        let got = window::update(&before, severity(&c["severity"]), m.as_ref(), u(&c["now"]));
        let note = &c["note"];
        assert_eq!(got.state, state(&c["after"]), "{note}");
        assert_eq!(got.cause.map(|c| c.as_str()), c["cause"].as_str(), "{note}");
        assert!(got.state.within_ceiling(), "{note}");
    }
    // The opening limits the generator assumed are weft's.
    assert_eq!(opening(Tier::Member, Limit::EventsIn), 750);
    let _ = Counter::ALL;
}
