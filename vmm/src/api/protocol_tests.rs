use super::*;

#[test]
fn requests_parse_as_documented() {
    let r = parse(br#"{"command": "dump", "file": "/tmp/x.core", "id": 7}"#).unwrap();
    assert_eq!(
        r.command,
        Command::Dump {
            file: "/tmp/x.core".into(),
            nvdimms: false
        }
    );
    let with = parse(br#"{"command": "dump", "file": "/x", "nvdimms": true}"#).unwrap();
    assert_eq!(
        with.command,
        Command::Dump {
            file: "/x".into(),
            nvdimms: true
        }
    );
    let e = parse(br#"{"command": "stats", "nvdimms": true}"#).unwrap_err();
    assert!(e.to_string().contains("'stats' takes no 'nvdimms'"), "{e}");
    assert_eq!(r.id, Some(Value::from(7)));
    assert_eq!(
        parse(br#"{"command":"stats"}"#).unwrap().command,
        Command::Stats
    );
    assert_eq!(
        parse(br#"{"command":"pause","id":"a"}"#).unwrap().command,
        Command::Pause
    );
    assert_eq!(
        parse(br#"{"command":"resume"}"#).unwrap().command,
        Command::Resume
    );
    assert_eq!(
        parse(br#"{"command":"version"}"#).unwrap().command,
        Command::Version
    );
}

#[test]
fn nvdimm_requests_parse_the_spec_as_nvdimm_does() {
    let r = parse(br#"{"command":"nvdimm","action":"add","spec":"1G,file=/tmp/x.img"}"#).unwrap();
    let Command::Nvdimm(NvdimmAction::Add(spec)) = r.command else {
        panic!("{r:?}")
    };
    assert_eq!(spec.size, 1 << 30);
    assert_eq!(
        spec.file.as_deref(),
        Some(std::path::Path::new("/tmp/x.img"))
    );
    let r = parse(br#"{"command":"nvdimm","action":"remove","dimm":1}"#).unwrap();
    assert_eq!(r.command, Command::Nvdimm(NvdimmAction::Remove(1)));
    let err = |l: &[u8]| parse(l).unwrap_err().to_string();
    assert!(err(br#"{"command":"nvdimm"}"#).contains("needs 'action'"));
    assert!(err(br#"{"command":"nvdimm","action":"add"}"#).contains("needs 'spec'"));
    assert!(
        err(br#"{"command":"nvdimm","action":"add","spec":"1G","dimm":2}"#)
            .contains("takes no 'dimm'")
    );
    assert!(err(br#"{"command":"nvdimm","action":"add","spec":"3M"}"#).contains("16 MiB"));
    assert!(
        err(br#"{"command":"nvdimm","action":"plug","spec":"1G"}"#).contains("'plug' is not known")
    );
    assert!(
        err(br#"{"command":"nvdimm","action":"add","spec":"1G","range":"0+1"}"#)
            .contains("takes no 'range'")
    );
}

#[test]
fn media_requests_parse_with_their_arguments() {
    let r = parse(br#"{"command":"media","action":"inject","dimm":1,"range":"1M+4K"}"#).unwrap();
    assert_eq!(
        r.command,
        Command::Media {
            action: MediaAction::Inject,
            target: Some(MediaTarget::Dimm(1)),
            range: Some("1M+4K".into())
        }
    );
    let r = parse(br#"{"command":"media","action":"inject","cxl":0,"range":"4K+64K"}"#).unwrap();
    assert_eq!(
        r.command,
        Command::Media {
            action: MediaAction::Inject,
            target: Some(MediaTarget::Cxl(0)),
            range: Some("4K+64K".into())
        }
    );
    let r = parse(br#"{"command":"media","action":"list"}"#).unwrap();
    assert_eq!(
        r.command,
        Command::Media {
            action: MediaAction::List,
            target: None,
            range: None
        }
    );
    let err = |l: &[u8]| parse(l).unwrap_err().to_string();
    assert!(err(br#"{"command":"media"}"#).contains("needs 'action'"));
    assert!(err(br#"{"command":"media","action":"zap"}"#).contains("'zap' is not known"));
    assert!(
        err(br#"{"command":"media","action":"clear","range":"0+512"}"#).contains("need 'dimm'")
    );
    assert!(
        err(br#"{"command":"media","action":"inject","dimm":0,"cxl":0,"range":"0+512"}"#)
            .contains("'dimm' or 'cxl', not both")
    );
    assert!(err(br#"{"command":"media","action":"inject","dimm":0}"#).contains("need 'range'"));
    assert!(
        err(br#"{"command":"media","action":"inject","dimm":-1,"range":"0+512"}"#)
            .contains("not a JSON object")
    );
    assert!(
        err(br#"{"command":"media","action":"list","range":"0+512"}"#).contains("takes no 'range'")
    );
    assert!(err(br#"{"command":"media","action":"list","file":"/x"}"#)
        .contains("'media' takes no 'file'"));
    assert!(err(br#"{"command":"stats","dimm":0}"#).contains("'stats' takes no 'dimm'"));
}

#[test]
fn health_requests_parse_their_settings() {
    let r = parse(
        br#"{"command":"health","action":"set","dimm":0,"set":"health=fatal,temperature=90"}"#,
    )
    .unwrap();
    let Command::Health {
        dimm: 0,
        action: HealthAction::Set(c),
    } = r.command
    else {
        panic!("{r:?}")
    };
    assert_eq!(c.temperature, Some(90));
    assert_eq!(
        parse(br#"{"command":"health","action":"get","dimm":1}"#)
            .unwrap()
            .command,
        Command::Health {
            dimm: 1,
            action: HealthAction::Get
        }
    );
    let err = |l: &[u8]| parse(l).unwrap_err().to_string();
    assert!(err(br#"{"command":"health","action":"get"}"#).contains("needs 'dimm'"));
    assert!(err(br#"{"command":"health","action":"set","dimm":0}"#).contains("needs 'set'"));
    assert!(
        err(br#"{"command":"health","action":"set","dimm":0,"set":"health=dead"}"#)
            .contains("'health=dead' is not valid")
    );
    assert!(err(br#"{"command":"health","dimm":0}"#).contains("needs 'action'"));
    assert!(
        err(br#"{"command":"health","action":"get","dimm":0,"range":"0+512"}"#)
            .contains("takes no 'range'")
    );
}

#[test]
fn bad_requests_get_one_sentence_that_names_what_was_wrong() {
    let err = |l: &[u8]| parse(l).unwrap_err().to_string();
    assert!(err(b"{\"command\":\"pasue\"}").contains("unknown command 'pasue': use version"));
    assert!(err(b"stats").contains("not a JSON object"));
    assert!(err(b"{\"command\":\"stats\",\"fiel\":1}").contains("unknown field `fiel`"));
    assert!(err(b"{\"command\":\"dump\"}").contains("needs 'file'"));
    assert!(err(b"{\"command\":\"dump\",\"file\":\"x.core\"}")
        .contains("'x.core' is not an absolute path"));
    assert!(err(b"{\"command\":\"stats\",\"file\":\"/x\"}").contains("'stats' takes no 'file'"));
    assert!(err(b"{\"command\":\"stats\",\"id\":[1]}").contains("'id' must be"));
    assert!(err(b"\xff\xfe").contains("not UTF-8"));
    assert_eq!(
        parse(&vec![b' '; MAX_LINE]).unwrap_err(),
        ProtocolError::TooLong
    );
    let long = format!("{{\"command\":\"{}\"}}", "x".repeat(1000));
    assert!(
        err(long.as_bytes()).len() < 200,
        "an echoed command is cut short"
    );
}

#[test]
fn replies_are_one_line_each() {
    let ok = Reply::ok(Some(Value::from(1)), serde_json::json!({"paused": true}));
    assert_eq!(
        ok.line(),
        b"{\"ok\":true,\"id\":1,\"result\":{\"paused\":true}}\n"
    );
    let e = Reply::error(None, "no".into(), true);
    assert_eq!(
        e.line(),
        b"{\"ok\":false,\"error\":\"no\",\"usage\":true}\n"
    );
    let back: Reply = serde_json::from_slice(&e.line()).unwrap();
    assert_eq!(back, e);
}
