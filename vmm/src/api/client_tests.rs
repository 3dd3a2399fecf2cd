use super::*;
use crate::exit_status::Classified;

#[test]
fn a_new_dimms_file_is_sent_absolute_and_a_bad_spec_is_refused_here() {
    let r = request_line(&Request::Nvdimm(NvdimmRequest::Add {
        spec: "256M,file=new dimm.img,label-size=0".into(),
    }))
    .unwrap();
    let spec: crate::config::NvdimmSpec = r["spec"].as_str().unwrap().parse().unwrap();
    let file = spec.file.unwrap();
    assert!(
        file.is_absolute() && file.ends_with("new dimm.img"),
        "{}",
        file.display()
    );
    assert_eq!((spec.size, spec.label_size), (256 << 20, 0));
    let e = request_line(&Request::Nvdimm(NvdimmRequest::Add { spec: "3M".into() })).unwrap_err();
    assert!(e.is_usage() && e.to_string().contains("16 MiB"), "{e}");
}

#[test]
fn a_relative_dump_path_is_sent_absolute_and_requests_parse_on_the_other_side() {
    let r = request_line(&Request::Dump {
        file: "guest.core".into(),
        nvdimms: false,
    })
    .unwrap();
    assert!(r.get("nvdimms").is_none(), "{r}");
    let r = request_line(&Request::Dump {
        file: "guest.core".into(),
        nvdimms: true,
    })
    .unwrap();
    assert_eq!(r["nvdimms"], true);
    let file = r["file"].as_str().unwrap();
    assert!(
        file.starts_with('/') && file.ends_with("/guest.core"),
        "{file}"
    );
    for c in [
        Request::Version,
        Request::Stats,
        Request::Pause,
        Request::Resume,
        Request::Dump {
            file: "/x".into(),
            nvdimms: false,
        },
        Request::Media(MediaRequest::Inject {
            dimm: 1,
            range: "1M+4K".into(),
            cxl: false,
        }),
        Request::Media(MediaRequest::Inject {
            dimm: 0,
            range: "4K+4K".into(),
            cxl: true,
        }),
        Request::Media(MediaRequest::Clear {
            dimm: 0,
            range: "0+512".into(),
            cxl: false,
        }),
        Request::Media(MediaRequest::List {
            dimm: None,
            cxl: false,
        }),
        Request::Media(MediaRequest::List {
            dimm: Some(2),
            cxl: true,
        }),
        Request::Health(HealthRequest::Set {
            dimm: 0,
            settings: vec!["health=fatal".into(), "temperature=90".into()],
        }),
        Request::Health(HealthRequest::Get { dimm: 0 }),
        Request::Nvdimm(NvdimmRequest::Add {
            spec: "1G,file=/tmp/new.img".into(),
        }),
        Request::Nvdimm(NvdimmRequest::Remove { dimm: 1 }),
    ] {
        let line = request_line(&c).unwrap().to_string();
        crate::api::protocol::parse(line.as_bytes()).unwrap();
    }
}

#[test]
fn media_answers_say_the_list_and_the_notification() {
    let inject = MediaRequest::Inject {
        dimm: 0,
        range: "1M+4K".into(),
        cxl: false,
    };
    let r =
        json!({"dimm": 0, "bad_ranges": [{"offset": 1048576, "length": 4096}], "notified": true});
    let a = media_answer(&inject, &r);
    assert!(
        a.starts_with("DIMM 0: bad ranges now 1048576+4096; the guest was notified"),
        "{a}"
    );
    let r = json!({"dimm": 1, "bad_ranges": [], "cleared_bytes": 4096});
    let clear = MediaRequest::Clear {
        dimm: 1,
        range: "1M+4K".into(),
        cxl: false,
    };
    assert_eq!(
        media_answer(&clear, &r),
        "DIMM 1: 4096 bytes cleared; bad ranges now none"
    );
    let inject = MediaRequest::Inject {
        dimm: 0,
        range: "4K+512".into(),
        cxl: true,
    };
    let r = json!({"cxl": 0, "poison": [{"dpa": 4096, "length": 512, "source": "external"}], "notified": false});
    assert_eq!(
        media_answer(&inject, &r),
        "CXL device 0: poison now 4096+512; the event record waits in the device's Failure log (the guest has not enabled its event interrupt)"
    );
    assert_eq!(
        media_line(&inject),
        json!({"command": "media", "action": "inject", "cxl": 0, "range": "4K+512"})
    );
}

#[test]
fn a_path_that_is_no_socket_is_the_users_mistake() {
    let e = call(Path::new("/nonexistent/api.sock"), &Request::Stats).unwrap_err();
    assert!(e.is_usage(), "{e}");
    assert!(
        e.to_string()
            .starts_with("/nonexistent/api.sock is not a control socket"),
        "{e}"
    );
}

/// A listener at a new socket that answers one connection with `reply`.
fn answering(name: &str, reply: Vec<u8>) -> (PathBuf, std::thread::JoinHandle<()>) {
    let dir = std::env::temp_dir().join(format!("pmemvm-client-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("api.sock");
    let l = crate::owner_socket::bind(&sock).unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        let _ = s.write_all(&reply);
    });
    (sock, t)
}

#[test]
fn a_reply_is_read_up_to_its_bound_only() {
    let (sock, t) = answering(
        "long",
        vec![b'x'; usize::try_from(MAX_REPLY).unwrap() + 100],
    );
    let e = call(&sock, &Request::Version).unwrap_err();
    assert!(!e.is_usage(), "{e}");
    assert!(
        e.to_string().contains("the reply is longer than 4 MiB"),
        "{e}"
    );
    t.join().unwrap();
    let (sock2, t) = answering(
        "ok",
        b"{\"ok\":true,\"result\":{\"protocol\":1}}\n".to_vec(),
    );
    let a = call(&sock2, &Request::Version).unwrap();
    assert!(a.contains("\"protocol\": 1"), "{a}");
    t.join().unwrap();
    for s in [sock, sock2] {
        std::fs::remove_dir_all(s.parent().unwrap()).unwrap();
    }
}
