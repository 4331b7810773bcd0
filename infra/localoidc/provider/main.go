// The local OpenID Provider of the test suite and of `rollout up`: zitadel/oidc's example
// provider (github.com/zitadel/oidc/v3/example/server: exampleop + storage, an
// OpenID-certified library) with the clients and users of a JSON file instead of the
// example's hard-coded ones.
//
// Two changes to the example, both through wrappers, none to the protocol:
//   - the ID token carries the userinfo claims (email, preferred_username) and a `groups`
//     claim, as Dex, Keycloak and Zitadel itself can be configured to do; the example
//     asserts them only at the userinfo endpoint;
//   - the issuer is given (http://127.0.0.1:<port>/), not derived from "localhost".
//
// Usage: provider <config.json>
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

type clientConfig struct {
	ID           string   `json:"id"`
	Secret       string   `json:"secret"`
	RedirectURIs []string `json:"redirectURIs"`
}

type userConfig struct {
	ID       string   `json:"id"`
	Username string   `json:"username"`
	Password string   `json:"password"`
	Email    string   `json:"email"`
	Groups   []string `json:"groups"`
}

type config struct {
	Issuer  string         `json:"issuer"`
	Listen  string         `json:"listen"`
	Clients []clientConfig `json:"clients"`
	Users   []userConfig   `json:"users"`
}

type userStore struct{ users map[string]*storage.User }

func (u userStore) GetUserByID(id string) *storage.User { return u.users[id] }
func (u userStore) ExampleClientID() string             { return storage.ServiceUserID }
func (u userStore) GetUserByUsername(name string) *storage.User {
	for _, user := range u.users {
		if user.Username == name {
			return user
		}
	}
	return nil
}

// groupsStorage is the example storage, adding each user's groups to the userinfo it sets.
type groupsStorage struct {
	*storage.Storage
	groups map[string][]string
}

func (s *groupsStorage) SetUserinfoFromScopes(ctx context.Context, info *oidc.UserInfo, userID, clientID string, scopes []string) error {
	if err := s.Storage.SetUserinfoFromScopes(ctx, info, userID, clientID, scopes); err != nil {
		return err
	}
	info.AppendClaims("groups", s.groups[userID])
	return nil
}

func (s *groupsStorage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	info.AppendClaims("groups", s.groups[subject])
	return nil
}

func (s *groupsStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	client, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return claimsInIDToken{client}, nil
}

// claimsInIDToken asserts the userinfo claims in the ID token.
type claimsInIDToken struct{ op.Client }

func (claimsInIDToken) IDTokenUserinfoClaimsAssertion() bool { return true }

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: provider <config.json>")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var cfg config
	if err := json.Unmarshal(data, &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	clients := make([]*storage.Client, 0, len(cfg.Clients))
	for _, c := range cfg.Clients {
		clients = append(clients, storage.WebClient(c.ID, c.Secret, c.RedirectURIs...))
	}
	storage.RegisterClients(clients...)
	users := map[string]*storage.User{}
	groups := map[string][]string{}
	for _, u := range cfg.Users {
		users[u.ID] = &storage.User{
			ID: u.ID, Username: u.Username, Password: u.Password, Email: u.Email, EmailVerified: true,
			FirstName: u.Username, LastName: u.Username, PreferredLanguage: language.English,
		}
		groups[u.ID] = append([]string{}, u.Groups...)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	store := &groupsStorage{storage.NewStorage(userStore{users}), groups}
	router := exampleop.SetupServer(cfg.Issuer, store, logger, false)
	listener, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Error("cannot listen", "address", cfg.Listen, "error", err)
		os.Exit(1)
	}
	logger.Info("OpenID Provider listening", "issuer", cfg.Issuer, "address", cfg.Listen)
	if err := http.Serve(listener, router); err != nil {
		logger.Error("server stopped", "error", err)
		os.Exit(1)
	}
}
