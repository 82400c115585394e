package batch

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A batch's input is a list of rows, numbered from 0: the Python files of
// a directory (each row runs one file), or the rows of a parameter file
// (JSON Lines: one object per line; CSV: a header, then one row per line,
// as an object of strings) that one script runs with. Rows are read one at
// a time, never all at once.

// row is one job of a batch.
type row struct {
	N      int64
	Name   string          // what its output directory is called
	Code   string          // the job's own code (a directory's file); empty: the batch's script
	File   string          // the file name it runs as
	Params json.RawMessage // the parameter row; nil without a parameter file
}

// input yields a batch's rows in order.
type input interface {
	// next returns the next row, or io.EOF after the last.
	next() (row, error)
	Close() error
}

// Input describes where a batch's rows come from: Dir, or Script with
// Params.
type Input struct {
	Dir    string `json:"dir,omitempty"`
	Script string `json:"script,omitempty"`
	Params string `json:"params,omitempty"`
}

// check says what is wrong with in, if anything.
func (in Input) check() error {
	switch {
	case in.Dir != "" && (in.Script != "" || in.Params != ""):
		return errors.New("give a directory of scripts, or one script with --params, not both")
	case in.Dir == "" && in.Script == "":
		return errors.New("give a directory of scripts, or one script with --params FILE")
	case in.Script != "" && in.Params == "":
		return errors.New("a single script needs --params FILE (JSON Lines or CSV, one job per row)")
	}
	return nil
}

// open starts reading in's rows.
func (in Input) open() (input, error) {
	if in.Dir != "" {
		return openDir(in.Dir)
	}
	return openParams(in.Params)
}

// script reads the batch's one script; "" for a directory.
func (in Input) script() (string, error) {
	if in.Script == "" {
		return "", nil
	}
	data, err := os.ReadFile(in.Script)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// count reads in's rows once and counts them.
func (in Input) count() (int64, error) {
	r, err := in.open()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var n int64
	for {
		if _, err := r.next(); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return n, err
		}
		n++
	}
}

// dirInput is the .py files of a directory, sorted by name.
type dirInput struct {
	dir   string
	names []string
	i     int
}

func openDir(dir string) (*dirInput, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	d := &dirInput{dir: dir}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".py") {
			d.names = append(d.names, e.Name())
		}
	}
	slices.Sort(d.names)
	if len(d.names) == 0 {
		return nil, fmt.Errorf("%s holds no .py files", dir)
	}
	return d, nil
}

func (d *dirInput) next() (row, error) {
	if d.i >= len(d.names) {
		return row{}, io.EOF
	}
	name := d.names[d.i]
	n := int64(d.i)
	d.i++
	code, err := os.ReadFile(filepath.Join(d.dir, name))
	if err != nil {
		return row{}, err
	}
	return row{N: n, Name: fmt.Sprintf("%06d-%s", n, strings.TrimSuffix(name, ".py")), Code: string(code), File: name}, nil
}

func (d *dirInput) Close() error { return nil }

// paramsInput is a parameter file: JSON Lines, or CSV when its name ends
// in .csv.
type paramsInput struct {
	f      *os.File
	lines  *bufio.Scanner // JSON Lines
	csv    *csv.Reader    // CSV
	header []string
	n      int64
	line   int
}

// maxLine bounds one line of a JSON Lines file.
const maxLine = 1 << 20

func openParams(path string) (*paramsInput, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	p := &paramsInput{f: f}
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		p.csv = csv.NewReader(bufio.NewReader(f))
		p.header, err = p.csv.Read()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: the header row: %w", path, err)
		}
		return p, nil
	}
	p.lines = bufio.NewScanner(f)
	p.lines.Buffer(make([]byte, 64<<10), maxLine)
	return p, nil
}

func (p *paramsInput) next() (row, error) {
	var params json.RawMessage
	if p.csv != nil {
		rec, err := p.csv.Read()
		if err != nil {
			return row{}, err
		}
		obj := make(map[string]string, len(p.header))
		for i, k := range p.header {
			if i < len(rec) {
				obj[k] = rec[i]
			}
		}
		params, _ = json.Marshal(obj)
	} else {
		for {
			if !p.lines.Scan() {
				if err := p.lines.Err(); err != nil {
					return row{}, err
				}
				return row{}, io.EOF
			}
			p.line++
			line := bytes.TrimSpace(p.lines.Bytes())
			if len(line) == 0 {
				continue
			}
			if !json.Valid(line) || line[0] != '{' {
				return row{}, fmt.Errorf("line %d is not a JSON object", p.line)
			}
			params = slices.Clone(line)
			break
		}
	}
	n := p.n
	p.n++
	return row{N: n, Name: fmt.Sprintf("%06d", n), Params: params}, nil
}

func (p *paramsInput) Close() error { return p.f.Close() }
