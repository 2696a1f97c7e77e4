//! The checks of `examples/docker-compose.yml`, which no test can run here (docker
//! is not needed by the project): the file parses, pins one full image version, has
//! the services and profiles that the README's "With Redis in docker" names, and its
//! ports are the ones in the URLs the README tells the examples to read.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fs;

    use yaml_rust2::{Yaml, YamlLoader};

    use crate::workspace_root;

    /// The services of each profile (`""`: the default, no profile), as the README
    /// names them.
    const PROFILES: [(&str, &[&str]); 3] = [
        ("", &["redis"]),
        (
            "sentinel",
            &[
                "sentinel-master",
                "sentinel-replica",
                "sentinel-1",
                "sentinel-2",
                "sentinel-3",
            ],
        ),
        (
            "cluster",
            &["cluster-1", "cluster-2", "cluster-3", "cluster-init"],
        ),
    ];

    /// The variable each profile's examples read, as `examples/common` names them.
    const VARIABLES: [(&str, &str); 3] = [
        ("", "REDIS_URL"),
        ("sentinel", "REDIS_SENTINEL_URLS"),
        ("cluster", "REDIS_CLUSTER_URLS"),
    ];

    fn read(path: &str) -> String {
        let path = workspace_root().join(path);
        fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    fn compose() -> Yaml {
        let text = read("examples/docker-compose.yml");
        let mut docs = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|err| panic!("examples/docker-compose.yml is not YAML: {err}"));
        assert_eq!(docs.len(), 1, "one YAML document");
        docs.remove(0)
    }

    /// The README's part on docker, from its heading to the next heading of its level
    /// or above.
    fn readme_docker() -> String {
        let readme = read("README.md");
        let start = readme
            .find("### With Redis in docker")
            .expect("the README has a \"With Redis in docker\" section");
        let rest = &readme[start + 3..];
        let end = rest
            .find("\n## ")
            .into_iter()
            .chain(rest.find("\n### "))
            .min()
            .unwrap_or(rest.len());
        rest[..end].to_owned()
    }

    fn services(compose: &Yaml) -> BTreeMap<String, Yaml> {
        compose["services"]
            .as_hash()
            .expect("a mapping of services")
            .iter()
            .map(|(name, service)| {
                let name = name.as_str().expect("a service name").to_owned();
                (name, service.clone())
            })
            .collect()
    }

    /// A value as text: a string, or a number.
    fn text(value: &Yaml) -> Option<String> {
        match value {
            Yaml::String(s) => Some(s.clone()),
            Yaml::Integer(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The words of a service's command: a list, or one string.
    fn command(service: &Yaml) -> Vec<String> {
        match &service["command"] {
            Yaml::Array(words) => words.iter().filter_map(text).collect(),
            Yaml::String(line) => line.split_whitespace().map(str::to_owned).collect(),
            Yaml::BadValue => Vec::new(),
            other => panic!("a command that is not a list or a string: {other:?}"),
        }
    }

    /// The port a service's server listens on: `--port N`, a Sentinel's
    /// `SENTINEL_PORT`, or the image's default.
    fn port(service: &Yaml) -> u16 {
        let words = command(service);
        let given = words
            .iter()
            .position(|word| word == "--port")
            .and_then(|at| words.get(at + 1).cloned())
            .or_else(|| text(&service["environment"]["SENTINEL_PORT"]));
        given.map_or(6379, |port| {
            port.parse()
                .unwrap_or_else(|_| panic!("port {port:?} is not a number"))
        })
    }

    /// The ports of the URLs in `NAME=redis://127.0.0.1:P,...` in `text`.
    fn ports_in_variable(text: &str, name: &str) -> BTreeSet<u16> {
        let assignment = format!("{name}=");
        let start = text
            .find(&assignment)
            .unwrap_or_else(|| panic!("the README does not set `{assignment}`"))
            + assignment.len();
        let value = text[start..]
            .split(|c: char| c.is_whitespace() || c == '`' || c == ';')
            .next()
            .unwrap_or_default();
        value
            .split(',')
            .map(|url| {
                let port = url
                    .strip_prefix("redis://127.0.0.1:")
                    .unwrap_or_else(|| panic!("{name}: {url:?} is not a loopback URL"));
                port.parse()
                    .unwrap_or_else(|_| panic!("{name}: {url:?} has no port"))
            })
            .collect()
    }

    #[test]
    fn every_service_runs_one_pinned_image() {
        let compose = compose();
        let services = services(&compose);
        assert!(!services.is_empty());
        let images: BTreeSet<String> = services
            .iter()
            .map(|(name, service)| {
                service["image"]
                    .as_str()
                    .unwrap_or_else(|| panic!("service {name} has no image"))
                    .to_owned()
            })
            .collect();
        assert_eq!(images.len(), 1, "one image for every service: {images:?}");
        let image = images.first().expect("an image");
        let version = image
            .strip_prefix("redis:")
            .unwrap_or_else(|| panic!("{image} is not a redis image"));
        let parts: Vec<&str> = version.split('.').collect();
        assert!(
            parts.len() == 3
                && parts
                    .iter()
                    .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())),
            "{image} is not pinned to a full version such as redis:7.2.5"
        );
        assert!(
            readme_docker().contains(&format!("`{image}`")),
            "the README names another image than {image}"
        );
    }

    #[test]
    fn services_and_profiles_are_the_ones_the_readme_names() {
        let compose = compose();
        let services = services(&compose);
        let mut by_profile: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (name, service) in &services {
            match &service["profiles"] {
                Yaml::BadValue => {
                    by_profile
                        .entry(String::new())
                        .or_default()
                        .insert(name.clone());
                }
                Yaml::Array(profiles) => {
                    assert!(!profiles.is_empty(), "{name}: an empty list of profiles");
                    for profile in profiles {
                        let profile = profile.as_str().expect("a profile name");
                        by_profile
                            .entry(profile.to_owned())
                            .or_default()
                            .insert(name.clone());
                    }
                }
                other => panic!("{name}: profiles is not a list: {other:?}"),
            }
        }
        let expected: BTreeMap<String, BTreeSet<String>> = PROFILES
            .iter()
            .map(|(profile, names)| {
                let names = names.iter().map(|name| (*name).to_owned()).collect();
                ((*profile).to_owned(), names)
            })
            .collect();
        assert_eq!(by_profile, expected);

        let readme = readme_docker();
        for (profile, names) in PROFILES {
            if !profile.is_empty() {
                assert!(readme.contains(&format!("`{profile}`")), "{profile}");
                assert!(
                    readme.contains(&format!("--profile {profile} up -d")),
                    "the README does not say how to start the profile {profile}"
                );
            }
            for name in names {
                assert!(readme.contains(&format!("`{name}`")), "{name}");
            }
        }
        // Every service that another depends on exists.
        for (name, service) in &services {
            if let Some(needs) = service["depends_on"].as_hash() {
                for need in needs.keys() {
                    let need = need.as_str().expect("a service name");
                    assert!(services.contains_key(need), "{name} depends on {need}");
                }
            }
        }
    }

    #[test]
    fn the_readme_urls_reach_the_services() {
        let compose = compose();
        let services = services(&compose);
        let readme = readme_docker();
        let common = read("examples/common/mod.rs");
        for (_, variable) in VARIABLES {
            assert!(
                common.contains(&format!("\"{variable}\"")),
                "examples/common does not read {variable}"
            );
        }
        let ports = |names: &[&str]| -> BTreeSet<u16> {
            names.iter().map(|name| port(&services[*name])).collect()
        };

        assert_eq!(ports_in_variable(&readme, "REDIS_URL"), ports(&["redis"]));
        let published = services["redis"]["ports"]
            .as_vec()
            .expect("the default server publishes its port");
        assert!(
            published
                .iter()
                .all(|port| port.as_str().is_some_and(|p| p == "127.0.0.1:6379:6379")),
            "the default server is published on 127.0.0.1:6379 only: {published:?}"
        );

        assert_eq!(
            ports_in_variable(&readme, "REDIS_SENTINEL_URLS"),
            ports(&["sentinel-1", "sentinel-2", "sentinel-3"])
        );
        let master = port(&services["sentinel-master"]);
        for sentinel in ["sentinel-1", "sentinel-2", "sentinel-3"] {
            let script = command(&services[sentinel]).join(" ");
            assert!(
                script.contains(&format!("sentinel monitor mymaster 127.0.0.1 {master} 2")),
                "{sentinel} does not watch the master as `mymaster`: {script}"
            );
        }
        let replica = command(&services["sentinel-replica"]).join(" ");
        assert!(
            replica.contains(&format!("--replicaof 127.0.0.1 {master}")),
            "{replica}"
        );

        let nodes = ["cluster-1", "cluster-2", "cluster-3"];
        assert_eq!(
            ports_in_variable(&readme, "REDIS_CLUSTER_URLS"),
            ports(&nodes)
        );
        let init = command(&services["cluster-init"]).join(" ");
        assert!(init.contains("redis-cli --cluster create"), "{init}");
        for node in nodes {
            let address = format!("127.0.0.1:{}", port(&services[node]));
            assert!(
                init.contains(&address),
                "cluster-init does not join {address}"
            );
            assert!(
                command(&services[node]).contains(&"--cluster-enabled".to_owned()),
                "{node} is not a cluster node"
            );
        }

        // The profiles' services share the host's network, where 127.0.0.1 is the
        // address every one of them and the examples reach; they publish no ports.
        for (profile, names) in PROFILES.iter().filter(|(profile, _)| !profile.is_empty()) {
            for name in *names {
                let service = &services[*name];
                assert_eq!(
                    service["network_mode"].as_str(),
                    Some("host"),
                    "{name} ({profile})"
                );
                assert!(service["ports"].is_badvalue(), "{name} publishes ports");
                if *name != "cluster-init" {
                    let words = command(service).join(" ");
                    assert!(
                        words.contains("--bind 127.0.0.1") || words.contains("bind 127.0.0.1"),
                        "{name} does not listen on 127.0.0.1 only"
                    );
                }
            }
        }
    }
}
