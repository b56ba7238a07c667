//! The TCP baselines' loss recovery options (SACK, RACK-TLP, CUBIC, delayed ACKs) in the
//! simulator: each keeps packets conserved and runs deterministic; under random loss SACK
//! and RACK-TLP replace timeouts with fast recovery; `baseline = "sackless"` is the run with
//! every option off, and the default is `baseline = "modern"` (Linux's TCP).

mod common;

/// The two-rack ResNet18 PS job on 1 % random link loss, 1 ms RTOmin.
const SETUP: &[&str] = &["transport.rto_min_us=1000.0", "topology.link_loss_rate=0.01"];

fn run(overrides: &[&str]) -> (String, gradwire_sim::Summary) {
    common::run(&common::two_racks_resnet18_ps(), &[SETUP, overrides].concat())
}

/// What every option set below starts from: SACK-less NewReno. A set that names another
/// transport or preset replaces it (the later override wins).
const SACKLESS_RENO: &[&str] = &["transport.kind=newreno", "baseline=sackless"];

/// Each option on the SACK-less TCP (`baseline = "sackless"`), and the presets.
const OPTIONS: &[&[&str]] = &[
    &[],
    &["transport.tcp_sack=true"],
    &["transport.tcp_sack=true", "transport.tcp_rack_tlp=true"],
    &["transport.tcp_cc=\"cubic\"", "transport.tcp_sack=true", "transport.tcp_rack_tlp=true"],
    &[
        "transport.tcp_cc=\"cubic\"",
        "transport.tcp_sack=true",
        "transport.tcp_rack_tlp=true",
        "transport.tcp_hystart=true",
    ],
    &["transport.tcp_cc=\"cubic\"", "transport.tcp_sack=true", "transport.tcp_cubic_variant=\"linux\""],
    &["transport.kind=dctcp", "transport.tcp_sack=true", "transport.tcp_rack_tlp=true", "transport.tcp_delack_count=2"],
    &["transport.kind=pias", "transport.tcp_sack=true", "transport.tcp_rack_tlp=true"],
    &["baseline=modern", "transport.rto_min_us=1000.0"],
    &["transport.kind=dctcp", "transport.tcp_sack=true", "transport.tcp_connections=persistent"],
    &["transport.tcp_sack=true", "transport.tcp_partial_ack_resend=true"],
    &["transport.tcp_sack=true", "transport.tcp_delack_count=2", "transport.tcp_slow_start=\"per_ack\""],
    // ns-3's TCP; its 3 s SYN timeout would outlast the run at 1 % loss
    &["baseline=ns3", "transport.rto_min_us=1000.0", "transport.tcp_handshake=false"],
    &["transport.tcp_connections=persistent", "transport.tcp_handshake=true"],
    &["transport.tcp_sack=true", "transport.tcp_rack_tlp=true", "transport.tcp_loss_cut=\"cwnd\""],
];

#[test]
fn every_recovery_option_conserves_packets_and_is_deterministic() {
    let outputs = common::conserved_and_deterministic(|ov| run(&[SACKLESS_RENO, ov].concat()), OPTIONS);
    let (reno, sack, rack) = (&outputs[0].1, &outputs[1].1, &outputs[2].1);
    assert!(reno.timeouts > 0, "1 % loss costs SACK-less NewReno timeouts: {reno:?}");
    assert!(sack.timeouts < reno.timeouts, "SACK {} vs NewReno {} timeouts", sack.timeouts, reno.timeouts);
    assert!(rack.timeouts < sack.timeouts, "RACK-TLP {} vs SACK {} timeouts", rack.timeouts, sack.timeouts);
    assert!(rack.fct_mean_ns < reno.fct_mean_ns, "{:?} vs {:?}", rack.fct_mean_ns, reno.fct_mean_ns);
    assert!(outputs.windows(2).all(|w| w[0].0 != w[1].0), "every option changes the run");
}

#[test]
fn persistent_connections_are_refused_where_they_mean_nothing() {
    let ov = ["transport.kind=pias".to_string(), "transport.tcp_connections=persistent".to_string()];
    let err = gradwire_sim::load(&common::two_racks_resnet18_ps(), &ov).map(|_| ()).expect_err("refused").to_string();
    assert!(err.contains("transport.tcp_connections"), "{err}");
}

#[test]
fn the_options_off_are_the_sackless_run_byte_for_byte() {
    let (plain, _) = run(&["transport.kind=newreno", "baseline=sackless"]);
    let spelled = [
        "transport.kind=newreno",
        "transport.tcp_sack=false",
        "transport.tcp_rack_tlp=false",
        "transport.tcp_cc=\"reno\"",
        "transport.tcp_delack_count=1",
        "transport.tcp_cong_avoid=\"per_ack\"",
        "transport.tcp_loss_cut=\"flight\"",
        "baseline=modern",
    ];
    assert_eq!(run(&spelled).0, plain);
}

#[test]
fn the_default_is_the_modern_preset() {
    let (default, _) = run(&["transport.kind=newreno"]);
    assert_eq!(run(&["transport.kind=newreno", "baseline=modern"]).0, default);
    assert_eq!(run(&["transport.kind=newreno", "baseline=linux"]).0, default, "linux is modern's other name");
}
